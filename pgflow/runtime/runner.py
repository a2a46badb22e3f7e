"""Runs one claimed attempt: prepare under the lock, the body outside any transaction,
then the outcome under the lock again.

The body may run more than once (a lost worker, a timeout); the transitions around it
happen once, because each is checked against the attempt's claim token.

An ``async def`` body goes through :meth:`Runner.execute_async` on the worker's event loop:
the same steps, with the queries of the prepare and of a failure sent to asgiref's shared
thread (``sync_to_async``) and a timeout cancelling the body's task.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DatabaseError

from .. import fanout, observability, store, tenants
from ..conf import pgflow_settings
from ..core import errors as error_capture
from ..core import jsonvalue
from ..core.flow import COMPLETE, FlowControl, Outcome
from ..evaluation import invoke, is_async, settle
from ..exceptions import StepTimeout, WorkflowNotFound
from ..failures import fail
from ..registry import resolve
from ..store import Claim, Prepared
from ..store.leases import connection_lost
from . import connections
from .answer import Answer
from .loop import cancel

logger = logging.getLogger("pgflow")


@dataclass(frozen=True, kw_only=True)
class Result:
    """What happened to one attempt, for the worker's log line and the tests."""

    claim: Claim
    outcome: str  # the Step.outcome word, or "ignored" / "ended_before_body" / "parked"
    applied: bool
    seconds: float
    # Set when the outcome was handed to a group commit that has not answered yet: the
    # body is over, the transition is not. ``settled`` gives the final Result.
    pending: Answer[bool] | None = None

    def settled(self, applied: bool) -> Result:
        """This result once its pending commit answered ``applied``; logs its line."""
        return _logged(self.claim, self.outcome if applied else "ignored", self.seconds, applied=applied)


class Runner:
    """Executes claims; remembers the prepared ones so a timeout can be applied to them.

    ``finish`` applies a body's outcome: ``store.finish`` by default (one transaction per
    attempt); the worker passes its committer's, which groups the outcomes of attempts that
    end together into one transaction.

    ``finish_later``, when given, takes the outcome of a body that returned and answers at
    once with a future of the commit: the thread (and the worker's slot) is free for the
    next body while the group commit runs, so claiming overlaps committing. Failures still
    go through ``finish`` and wait, because their errors are reported after the commit.
    """

    def __init__(
        self,
        finish: Callable[[store.Finished], bool] | None = None,
        finish_later: Callable[[store.Finished], Answer[bool]] | None = None,
    ) -> None:
        self._active: dict[Any, Prepared] = {}
        self._timed_out: set[Any] = set()
        # Attempts whose outcome was handed over (the body's, or a timeout's): the first wins,
        # so a body returning just as its timeout fires never has both applied.
        self._handed: set[Any] = set()
        self._tasks: dict[Any, asyncio.Task[Any]] = {}  # async bodies' tasks, cancelled by a timeout
        self._lock = threading.Lock()
        self._finish = finish or _finish_one
        self._finish_later = finish_later

    def execute(self, held: Claim) -> Result:
        # This thread's connection, if a query on it failed and it died (the database went
        # away), is closed before the next body: the body's queries then reconnect.
        connections.close_if_unusable()
        started = time.monotonic()
        # The outputs the claim brought (a step whose body reads them): self.outputs costs no query.
        prepared = store.quick_prepare(held, outputs=held.outputs) or store.prepare(held)
        if prepared is None:
            return self._result(held, "ended_before_body", started)
        self._track(prepared)
        try:
            if prepared.definition.fans_out:
                word, applied = fanout.execute(prepared)
                return self._result(held, word, started, applied=applied)
            outcome, output, error = run_body(prepared)
            return self._conclude(prepared, outcome, output, error, started)
        finally:
            self._untrack(held.token)

    async def execute_async(self, held: Claim, outputs: Mapping[str, Any] | None = None) -> Result:
        """``execute`` for an ``async def`` body, awaited on the worker's loop; ``outputs``: the
        run's, if the claim loop read them, else those the claim brought (otherwise read here,
        before the body)."""
        started = time.monotonic()
        outputs = outputs if outputs is not None else held.outputs
        prepared = store.quick_prepare(held, outputs=outputs)
        outputs_read = prepared is not None and outputs is not None
        if prepared is None:
            prepared = await sync_to_async(_prepare)(held)
            outputs_read = held.outputs is not None  # prepare's instance has the claim's
        if prepared is None:
            return self._result(held, "ended_before_body", started)
        self._track(prepared, asyncio.current_task())
        try:
            if not outputs_read:
                # self.outputs reads the database: read now, so the body may use it on the loop.
                # (Each such read waits its turn in asgiref's one thread for sync code.)
                await sync_to_async(_read_outputs)(prepared)
            outcome, output, error = await run_body_async(prepared)
            if error is None and self._finish_later is not None and self._hand_over(held.token):
                return self._pending(held, outcome, output, started, prepared.workflow.attributes_set)
            # A failure, an outcome the timeout overtook, or a commit to wait for: queries.
            return await sync_to_async(self._conclude)(prepared, outcome, output, error, started)
        finally:
            self._untrack(held.token)

    @staticmethod
    def is_async(held: Claim) -> bool:
        """True when the claimed step's body is an ``async def`` (a fan_out's runs in a thread)."""
        try:
            workflow_class = resolve(held.run_fields.get("workflow_class", ""))
        except WorkflowNotFound:
            return False
        definition = workflow_class.steps().get(held.step_name)
        return definition is not None and not definition.fans_out and is_async(workflow_class, definition)

    def _track(self, prepared: Prepared, task: asyncio.Task[Any] | None = None) -> None:
        with self._lock:
            self._active[prepared.claim.token] = prepared
            if task is not None:
                self._tasks[prepared.claim.token] = task

    def _untrack(self, token: Any) -> None:
        with self._lock:
            self._active.pop(token, None)
            self._tasks.pop(token, None)
            self._timed_out.discard(token)
            self._handed.discard(token)

    def _conclude(
        self, prepared: Prepared, outcome: Outcome, output: Any, error: BaseException | None, started: float
    ) -> Result:
        """Apply what the body ended with, unless its timeout was applied first."""
        held = prepared.claim
        if not self._hand_over(held.token):  # the timeout was handed over first
            store.log_ignored(held, "its timeout was applied first")
            return self._result(held, "ignored", started, applied=False)
        if error is not None:
            if connections.lost_with_connection(error):
                return self._lost(prepared, error, started)
            return self._fail(prepared, error, started)
        # What the body's set_attributes() set ({} for none): committed with its outcome.
        attributes = prepared.workflow.attributes_set
        if self._finish_later is not None:
            return self._pending(held, outcome, output, started, attributes)
        applied = self._finish(store.Finished(claim=held, outcome=outcome, output=output, attributes=attributes))
        return self._result(held, outcome.word if applied else "ignored", started, applied=applied)

    def _pending(
        self, held: Claim, outcome: Outcome, output: Any, started: float, attributes: dict[str, Any] | None = None
    ) -> Result:
        assert self._finish_later is not None
        return Result(
            claim=held,
            outcome=outcome.word,
            applied=False,
            seconds=time.monotonic() - started,
            pending=self._finish_later(
                store.Finished(claim=held, outcome=outcome, output=output, attributes=attributes)
            ),
        )

    def overdue(self, at: datetime) -> list[Any]:
        """Tokens of running attempts past their step's ``timeout``."""
        with self._lock:
            late = [
                token
                for token, prepared in self._active.items()
                if prepared.deadline is not None and prepared.deadline <= at and token not in self._timed_out
            ]
            self._timed_out.update(late)  # each is reported once
            return late

    def time_out(self, token: Any) -> Result | None:
        """Fail a running attempt that passed its ``timeout``; its body's late return is ignored."""
        with self._lock:
            prepared = self._active.get(token)
            task = self._tasks.get(token)
        if prepared is None or not self._hand_over(token):
            return None  # the body ended first: its outcome is the one applied
        if task is not None:
            cancel(task)  # an async body stops at its next await; a thread's cannot be stopped
        seconds = prepared.definition.timeout
        error = StepTimeout(f"step {prepared.step.step_name!r} ran past its timeout of {seconds:g}s")
        return self._fail(prepared, error, time.monotonic())

    def _hand_over(self, token: Any) -> bool:
        """True for the first outcome of the attempt ``token`` (body or timeout), False after."""
        with self._lock:
            if token in self._handed:
                return False
            self._handed.add(token)
            return True

    def _lost(self, prepared: Prepared, error: BaseException, started: float) -> Result:
        """The body failed because the database went away under it: not the body's fault, so
        not its policies' to judge. Its dead connection is closed, and the attempt is recorded
        lost on a fresh one (store.connection_lost: a fresh attempt, bounded by
        MAX_LOST_ATTEMPTS). With the database still away that fails too, and the attempt is
        left to its lease: the sweep records it lost once the database is back."""
        held = prepared.claim
        connections.close_if_unusable()  # async bodies share it: another may have replaced it already
        observability.attempt_failed(error)
        captured = error_capture.capture(error, **pgflow_settings.capture_options())
        try:
            applied = connection_lost(held, captured)
        except connections.CONNECTION_ERRORS + (DatabaseError,) as again:
            connections.close()
            logger.warning(
                "run=%s step=%s attempt=%s: the database went away under its body and is still away (%s); "
                "its lease will run out and the sweep re-attempts it",
                held.run_id,
                held.step_name,
                held.attempt,
                " ".join(str(again).split()),
                extra={"action": "connection_lost_unrecorded", "run_id": held.run_id},
            )
            return self._result(held, "ignored", started, applied=False)
        return self._result(held, "lost" if applied else "ignored", started, applied=applied)

    def _fail(self, prepared: Prepared, error: BaseException, started: float) -> Result:
        observability.attempt_failed(error)
        outcome, applied = fail(prepared, error, finish=self._finish)
        return self._result(prepared.claim, outcome.word if applied else "ignored", started, applied=applied)

    @staticmethod
    def _result(held: Claim, outcome: str, started: float, *, applied: bool = True) -> Result:
        return _logged(held, outcome, time.monotonic() - started, applied=applied)


def _logged(held: Claim, outcome: str, seconds: float, *, applied: bool) -> Result:
    if logger.isEnabledFor(logging.INFO):  # the extra's dict is built for every step otherwise
        logger.info(
            "run=%s step=%s attempt=%s outcome=%s duration=%.3fs",
            held.run_id,
            held.step_name,
            held.attempt,
            outcome,
            seconds,
            extra={"action": "step", "run_id": held.run_id, "step": held.step_name, "outcome": outcome},
        )
    observability.attempt_ended(held, outcome, applied=applied)
    return Result(claim=held, outcome=outcome, applied=applied, seconds=seconds)


def _prepare(held: Claim) -> Prepared | None:
    """``store.prepare`` in asgiref's thread for sync code, whose connection all async bodies
    share: a connection that died there is closed first, as a step thread's is."""
    connections.close_if_unusable()
    return store.prepare(held)


def _read_outputs(prepared: Prepared) -> None:
    connections.close_if_unusable()
    prepared.workflow.outputs  # noqa: B018 - read now, so the body may use it on the loop


def _finish_one(item: store.Finished) -> bool:
    return store.finish(item.claim, item.outcome, output=item.output, error=item.error, attributes=item.attributes)


def run_body(prepared: Prepared) -> tuple[Outcome, Any, BaseException | None]:
    """Call the step body; returns (outcome, output, error). Never raises for the body's sake.
    An ``async def`` body is awaited here (``pgflow.testing`` runs every body this way)."""
    try:
        # The run's tenant context (PGFLOW["TENANT_CONTEXT"]): none for a run without a tenant.
        with tenants.context_of(prepared.workflow):
            returned = invoke(prepared.workflow, prepared.definition, prepared.signal)
            if returned is not None and inspect.isawaitable(returned):
                prepared.workflow.outputs  # noqa: B018 - read here: a query cannot run in the body's loop
                returned = settle(returned)
    except FlowControl as control:  # first: a flow-control verb is not a failure
        return control.outcome, None, None
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt… fail the attempt too
        # A body's SystemExit is not the worker's: left to escape, the attempt would stay
        # in progress until its lease ran out and be taken for a lost worker.
        return Outcome(kind=COMPLETE), None, exc
    return _output(prepared, returned)


async def run_body_async(prepared: Prepared) -> tuple[Outcome, Any, BaseException | None]:
    """``run_body`` for an ``async def`` body, awaited on the running loop."""
    try:
        # The worker runs a tenant's async body in a step thread (runtime/held.py) when a
        # TENANT_CONTEXT is set; entered here too, for a context kept in context variables.
        with tenants.context_of(prepared.workflow):
            returned = await invoke(prepared.workflow, prepared.definition, prepared.signal)
    except FlowControl as control:
        return control.outcome, None, None
    except BaseException as exc:  # noqa: BLE001 - a cancelled body (its timeout) included
        return Outcome(kind=COMPLETE), None, exc
    return _output(prepared, returned)


def _output(prepared: Prepared, returned: Any) -> tuple[Outcome, Any, BaseException | None]:
    if returned is None:  # most steps return nothing: JSON's null, nothing to check
        return Outcome(kind=COMPLETE), None, None
    try:
        jsonvalue.encode(returned, f"the output of step {prepared.definition.name!r}")
    except (TypeError, ValueError) as exc:
        return Outcome(kind=COMPLETE), None, exc
    return Outcome(kind=COMPLETE), returned, None
