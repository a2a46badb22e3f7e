"""A run's attempts against the steps a test expects (``assert_steps``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..models import Step, WorkflowRun


class Attempt(NamedTuple):
    step: str
    status: str  # scheduled, waiting, in_progress, completed, skipped, failed, cancelled
    outcome: str  # the word its end recorded (completed, timed_out, lost, reattempted …), or ""

    def matches(self, expected: str) -> bool:
        """``"charge"`` matches any attempt of charge; ``"charge:cancelled"`` one whose status
        or outcome is ``cancelled``."""
        name, _, word = expected.partition(":")
        return name == self.step and (not word or word in (self.status, self.outcome))

    def __str__(self) -> str:
        words = [self.status] + ([self.outcome] if self.outcome and self.outcome != self.status else [])
        return f"{self.step} ({', '.join(words)})"


def step_history(run: WorkflowRun | int) -> list[Attempt]:
    """Every attempt of ``run``, oldest first: a step reattempted, lost or handed back is
    there once per attempt, the open attempt (scheduled, waiting, in progress) last."""
    run_id = run.pk if isinstance(run, WorkflowRun) else run
    rows = Step.objects.filter(run_id=run_id).order_by("created_at", "id").values_list("step_name", "status", "outcome")
    return [Attempt(*row) for row in rows]


def assert_steps(run: WorkflowRun | int, expected: Sequence[str]) -> None:
    """Assert ``run``'s attempts, in order, are ``expected``: step names, each optionally
    with ``:<status or outcome>`` (``"charge:completed"``, ``"charge:timed_out"``). On a
    difference, the AssertionError lists both side by side and marks where they part."""
    if isinstance(expected, str) or not all(isinstance(item, str) for item in expected):
        accepted = 'a list of step names ("charge" or "charge:completed")'
        raise TypeError(f"assert_steps() takes {accepted}, got {expected!r}")
    actual = step_history(run)
    if len(actual) == len(expected) and all(a.matches(e) for a, e in zip(actual, expected, strict=True)):
        return
    run_id = run.pk if isinstance(run, WorkflowRun) else run
    row = WorkflowRun.objects.filter(pk=run_id).values_list("workflow_class", "status").first()
    title = f"{row[0].rsplit('.', 1)[-1]} #{run_id} ({row[1]})" if row else f"run #{run_id} (no such run)"
    raise AssertionError(f"the steps of {title} are not the ones expected:\n{_table(expected, actual)}")


def _table(expected: Sequence[str], actual: list[Attempt]) -> str:
    width = max([len("expected"), *(len(item) for item in expected)])
    lines = [f"     {'expected':<{width}}  actual"]
    for position in range(max(len(expected), len(actual))):
        want = expected[position] if position < len(expected) else "—"
        got = actual[position] if position < len(actual) else None
        same = got is not None and position < len(expected) and got.matches(want)
        lines.append(f"{' ' if same else '>'} {position + 1:>2} {want:<{width}}  {got if got else '—'}")
    return "\n".join(lines)
