"""The changes the command line makes: ``pause``, ``resume``, ``cancel``, ``skip``, ``rerun``
and ``signal``, each through the API the admin and the MCP server call (the run's own
controls, ``run.rerun_from``, ``pgflow.signal``), so each is one transition under the run's
lock, recorded in its audit trail with the actor.

A :class:`Change` checks its own arguments first (:meth:`Change.check`), then, per run, says
why it would not apply (:meth:`Change.refusal`, read without the lock: the real call may still
refuse if the run changed in between, and that refusal is reported the same way), what it would
do (:meth:`Change.would`, the dry run) and does it (:meth:`Change.apply`).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import Any

from .. import records
from ..core import jsonvalue
from ..core.events import ACTOR_LIMIT
from ..core.states import CONTROLS, OPEN_RUN, RERUNNABLE_RUN, RunStatus, control_error
from ..exceptions import PgflowError
from ..models import WorkflowRun
from ..signals import NAME_LIMIT, signal
from . import BAD_ARGUMENTS, REFUSED, CliError

# subcommand -> the run control it calls (core.states.CONTROLS)
CONTROL_OF = {"pause": "pause", "resume": "resume", "cancel": "cancel", "skip": "skip_step"}
VERBS = (*CONTROL_OF, "rerun", "signal")
ACTOR_PREFIX = "cli:"
MAX_ACTOR = 100  # characters of --actor: "cli:<name>" stays well inside the actor column


def actor_of(name: str | None) -> str:
    """``cli:<name>``: ``--actor``, else the login name of whoever runs the command."""
    if name is None:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no login name (a container's bare uid)
            name = "unknown"
    name = name.strip()
    if not name or len(name) > MAX_ACTOR or jsonvalue.text_problem(name):
        raise CliError(
            f"--actor must be a name of 1 to {MAX_ACTOR} characters (no NUL), got {name!r}", code=BAD_ARGUMENTS
        )
    return f"{ACTOR_PREFIX}{name}"[:ACTOR_LIMIT]


@dataclass(frozen=True, kw_only=True)
class Change:
    """One subcommand's change with its arguments: ``step`` and ``input`` (None: keep the
    run's) for ``rerun``, ``name`` and ``payload`` for ``signal``."""

    verb: str
    step: str | None = None
    input: dict[str, Any] | None = None
    name: str | None = None
    payload: Any = None

    def check(self) -> None:
        """The arguments themselves: a bad one is a bad argument, before any run is read."""
        if self.verb not in VERBS:
            raise CliError(f"the change must be one of {', '.join(VERBS)}, got {self.verb!r}", code=BAD_ARGUMENTS)
        if self.verb == "rerun":
            if not self.step or jsonvalue.text_problem(self.step):
                raise CliError("rerun needs --from STEP, the name of one of the run's steps", code=BAD_ARGUMENTS)
            if self.input is not None:
                _storable(self.input, "--input")
        if self.verb == "signal":
            name = self.name or ""
            if not name.strip() or len(name) > NAME_LIMIT or jsonvalue.text_problem(name):
                raise CliError(
                    f"NAME must be a signal name of 1 to {NAME_LIMIT} characters (no NUL), got {name!r}",
                    code=BAD_ARGUMENTS,
                )
            _storable(self.payload, "--payload")

    @property
    def what(self) -> str:
        """The change in words, for a confirmation: "pause", "re-run from step charge" …"""
        if self.verb == "rerun":
            return f"re-run from step {self.step}"
        if self.verb == "signal":
            return f"send signal {self.name!r} to"
        return self.verb

    def refusal(self, run: WorkflowRun) -> str | None:
        """Why the change does not apply to ``run`` as it stands, or None."""
        if self.verb in CONTROL_OF:
            problem = control_error(CONTROL_OF[self.verb], run.status)
            return f"run {run.pk}: {problem}" if problem else None
        if self.verb == "signal":
            if run.status not in OPEN_RUN:
                return f"run {run.pk} is {run.status}: it takes no more signals (only a running or paused run)"
            return None
        if run.status not in RERUNNABLE_RUN:
            return (
                f"run {run.pk} is {run.status}: only a finished, cancelled or paused run can be re-run "
                "(pause or cancel it first)"
            )
        try:
            run.rerun_plan(self.step or "")
        except PgflowError as exc:
            return f"run {run.pk}: {exc}"
        return None

    def would(self, run: WorkflowRun) -> dict[str, Any]:
        """The dry run's answer for a run the change applies to."""
        answer: dict[str, Any] = {"run_id": run.pk, "status": run.status, "changed": False}
        where = f" at step {run.current_step}" if run.current_step else ""
        if self.verb in CONTROL_OF:
            effect = CONTROLS[CONTROL_OF[self.verb]].effect
            answer["would"] = f"{effect}: run {run.pk} ({run.workflow_name}, {run.status}{where})"
        elif self.verb == "signal":
            effect = records.signal_effect(run, self.name or "")
            answer["would"] = f"deliver signal {self.name!r} to run {run.pk}: {effect}"
        else:
            plan = run.rerun_plan(self.step or "")
            copied = list(plan["copied"])
            outputs = f"copying the outputs of {', '.join(copied)}" if copied else "copying no outputs"
            given = "the input given" if self.input is not None else "the run's own input"
            then = f"; run {run.pk} is paused, so it is cancelled as re-run" if run.status == RunStatus.PAUSED else ""
            answer["would"] = (
                f"start a new run of {run.workflow_name} from step {self.step}, {outputs}, with {given}, "
                f"linked to run {run.pk}{then}"
            )
            answer.update(copied=copied, not_copied=plan["not_copied"], input=self.input or run.input)
        return answer

    def apply(self, run: WorkflowRun, *, actor: str) -> dict[str, Any]:
        """Make the change; a refusal under the lock raises :class:`CliError` (REFUSED)."""
        answer: dict[str, Any] = {"run_id": run.pk, "changed": True}
        try:
            if self.verb in CONTROL_OF:
                control = CONTROLS[CONTROL_OF[self.verb]]
                getattr(run, control.name)(actor=actor)
                answer["done"] = f"run {run.pk} {control.done} by {actor}"
            elif self.verb == "signal":
                received = signal(run, self.name or "", self.payload, actor=actor)
                answer.update(signal_id=received.pk, done=f"signal {self.name!r} delivered to run {run.pk} by {actor}")
            else:
                rerun = run.rerun_from(self.step or "", input=self.input, actor=actor)
                answer.update(
                    rerun_id=rerun.pk,
                    rerun_status=rerun.status,
                    done=f"run {run.pk} re-run from step {self.step} as run {rerun.pk} by {actor}",
                )
        except (PgflowError, ValueError, TypeError, WorkflowRun.DoesNotExist) as exc:
            message = str(exc) or type(exc).__name__
            shown = message if message.startswith(f"run {run.pk}") else f"run {run.pk}: {message}"
            raise CliError(shown, code=REFUSED) from None
        run.refresh_from_db()
        answer["status"] = run.status
        answer["current_step"] = run.current_step
        return answer


def _storable(value: Any, option: str) -> None:
    try:
        jsonvalue.encode(value, option)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc), code=BAD_ARGUMENTS) from None
