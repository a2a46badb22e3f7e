"""django-q2 task functions the fan-out tests add to batches (importable by dotted path, so a
real qcluster subprocess runs them)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CONSTANT = 42  # not a function: batch.add refuses it


def double(n: int) -> int:
    return n * 2


def fail(message: str) -> None:
    raise RuntimeError(message)


def mark(path: str, text: str) -> str:
    """Append ``text`` to the file at ``path``: the tests count how often a task ran."""
    with Path(path).open("a") as marks:
        marks.write(text + "\n")
    return text


def fail_unless_exists(path: str) -> str:
    if not Path(path).exists():
        raise FileNotFoundError(f"{path} is not there yet")
    return "found"


def sleep_until(when: float) -> float:
    """Sleep until the wall-clock time ``when``: two tasks end at the same instant."""
    time.sleep(max(0.0, when - time.time()))
    return when


def die() -> None:
    """Kill the django-q2 worker process running this task: it records nothing."""
    os.kill(os.getpid(), signal.SIGKILL)


class Tasks:
    @classmethod
    def tripled(cls, n: int) -> int:
        return n * 3

    @staticmethod
    def halved(n: int) -> float:
        return n / 2

    def bound(self, n: int) -> int:
        return n
