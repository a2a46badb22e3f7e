"""What a task's run reads as in Django's terms (pgflow.tasks.mapping), from plain values."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgflow.tasks import mapping
from pgflow.tasks.mapping import FAILED, READY, RUNNING, SUCCESSFUL, Attempt

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


def failed(**kw):
    return Attempt(status="failed", started_at=T0, finished_at=T1, worker="w1", error_class="ValueError", **kw)


@pytest.mark.parametrize(
    ("run_status", "attempts", "expected"),
    [
        ("running", [Attempt(status="scheduled")], READY),
        ("running", [failed(), Attempt(status="scheduled")], READY),  # waiting to be re-attempted
        ("running", [Attempt(status="in_progress", started_at=T0, worker="w1")], RUNNING),
        ("running", [], READY),
        ("finished", [Attempt(status="completed", started_at=T0, output=5)], SUCCESSFUL),
        ("cancelled", [failed()], FAILED),  # the policy gave up
        ("cancelled", [Attempt(status="cancelled")], FAILED),  # an operator cancelled it
        ("paused", [failed()], FAILED),  # a pause policy, or too many lost workers
        ("paused", [Attempt(status="cancelled", started_at=None)], READY),  # an operator paused it
    ],
)
def test_status(run_status, attempts, expected):
    assert mapping.status(run_status, attempts) == expected


def test_finished_at_is_the_runs_end_or_a_paused_failures_last_attempt():
    assert mapping.finished_at(SUCCESSFUL, T1, []) == T1
    assert mapping.finished_at(FAILED, None, [failed()]) == T1
    assert mapping.finished_at(READY, None, [failed()]) is None


def test_started_attempts_are_the_workers_and_the_attempt_count():
    attempts = [failed(), Attempt(status="in_progress", started_at=T1, worker="w2"), Attempt(status="scheduled")]
    assert [a.worker for a in mapping.started(attempts)] == ["w1", "w2"]


def test_exception_class_path_is_importable():
    assert mapping.exception_class_path("ValueError") == "builtins.ValueError"
    assert mapping.exception_class_path("shop.errors.Declined") == "shop.errors.Declined"


def test_traceback_ends_with_the_error_line_as_python_prints_it():
    bare = failed(error_message="boom", error_backtrace='Traceback (most recent call last):\n  File "x.py", line 1\n')
    assert mapping.traceback_text(bare).endswith("line 1\nValueError: boom\n")
    full = failed(error_message="boom", error_backtrace="Traceback (most recent call last):\nValueError: boom")
    assert mapping.traceback_text(full) == "Traceback (most recent call last):\nValueError: boom\n"


def test_return_value_only_of_a_successful_task():
    done = [failed(), Attempt(status="completed", output={"a": [1]})]
    assert mapping.return_value(SUCCESSFUL, done) == {"a": [1]}
    assert mapping.return_value(FAILED, done) is None
