"""Runs one claimed attempt: prepare under the lock, the body outside any transaction,
then the outcome under the lock again.

The body may run more than once (a lost worker, a timeout); the transitions around it
happen once, because each is checked against the attempt's claim token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import observability, store
from ..core import jsonvalue
from ..core.flow import COMPLETE, FlowControl, Outcome
from ..evaluation import invoke
from ..exceptions import StepTimeout
from ..failures import fail
from ..store import Claim, Prepared

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
    pending: Future[bool] | None = None

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
        finish_later: Callable[[store.Finished], Future[bool]] | None = None,
    ) -> None:
        self._active: dict[Any, Prepared] = {}
        self._timed_out: set[Any] = set()
        # Attempts whose outcome was handed over (the body's, or a timeout's): the first wins,
        # so a body returning just as its timeout fires never has both applied.
        self._handed: set[Any] = set()
        self._lock = threading.Lock()
        self._finish = finish or _finish_one
        self._finish_later = finish_later

    def execute(self, held: Claim) -> Result:
        started = time.monotonic()
        prepared = store.quick_prepare(held) or store.prepare(held)
        if prepared is None:
            return self._result(held, "ended_before_body", started)
        with self._lock:
            self._active[held.token] = prepared
        try:
            if prepared.definition.fans_out:
                from .. import fanout

                word, applied = fanout.execute(prepared)
                return self._result(held, word, started, applied=applied)
            outcome, output, error = run_body(prepared)
            if not self._hand_over(held.token):  # the timeout was handed over first
                store.log_ignored(held, "its timeout was applied first")
                return self._result(held, "ignored", started, applied=False)
            if error is not None:
                return self._fail(prepared, error, started)
            finished = store.Finished(claim=held, outcome=outcome, output=output)
            if self._finish_later is not None:
                return Result(
                    claim=held,
                    outcome=outcome.word,
                    applied=False,
                    seconds=time.monotonic() - started,
                    pending=self._finish_later(finished),
                )
            applied = self._finish(finished)
            return self._result(held, outcome.word if applied else "ignored", started, applied=applied)
        finally:
            with self._lock:
                self._active.pop(held.token, None)
                self._timed_out.discard(held.token)
                self._handed.discard(held.token)

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
        if prepared is None or not self._hand_over(token):
            return None  # the body ended first: its outcome is the one applied
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

    def _fail(self, prepared: Prepared, error: BaseException, started: float) -> Result:
        observability.attempt_failed(error)
        outcome, applied = fail(prepared, error, finish=self._finish)
        return self._result(prepared.claim, outcome.word if applied else "ignored", started, applied=applied)

    @staticmethod
    def _result(held: Claim, outcome: str, started: float, *, applied: bool = True) -> Result:
        return _logged(held, outcome, time.monotonic() - started, applied=applied)


def _logged(held: Claim, outcome: str, seconds: float, *, applied: bool) -> Result:
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


def _finish_one(item: store.Finished) -> bool:
    return store.finish(item.claim, item.outcome, output=item.output, error=item.error)


def run_body(prepared: Prepared) -> tuple[Outcome, Any, BaseException | None]:
    """Call the step body; returns (outcome, output, error). Never raises for the body's sake."""
    try:
        returned = invoke(prepared.workflow, prepared.definition, prepared.signal)
    except FlowControl as control:  # first: a flow-control verb is not a failure
        return control.outcome, None, None
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt… fail the attempt too
        # A body's SystemExit is not the worker's: left to escape, the attempt would stay
        # in progress until its lease ran out and be taken for a lost worker.
        return Outcome(kind=COMPLETE), None, exc
    try:
        jsonvalue.encode(returned, f"the output of step {prepared.definition.name!r}")
    except (TypeError, ValueError) as exc:
        return Outcome(kind=COMPLETE), None, exc
    return Outcome(kind=COMPLETE), returned, None
