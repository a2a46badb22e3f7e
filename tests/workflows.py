"""Workflow classes the integration and acceptance tests run (importable by worker
subprocesses, since runs store their class's dotted path)."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from pathlib import Path

import pgflow
from pgflow import OnException, step


def _mark(name: str) -> None:
    """Append a line to the file named by PGFLOW_TEST_MARKS (acceptance tests count bodies)."""
    path = os.environ.get("PGFLOW_TEST_MARKS")
    if path:
        with Path(path).open("a") as marks:
            marks.write(name + "\n")


class ThreeSteps(pgflow.Workflow):
    @step
    def one(self):
        _mark(f"{self.run.pk}:one:{self.attempt}")
        return {"n": 1}

    @step
    def two(self):
        _mark(f"{self.run.pk}:two:{self.attempt}")
        return {"n": self.outputs["one"]["n"] + 1}

    @step
    def three(self):
        _mark(f"{self.run.pk}:three:{self.attempt}")
        return {"n": self.outputs["two"]["n"] + 1}


class SlowSteps(pgflow.Workflow):
    """Bodies that sleep for input["sleep"] seconds (default 0.05)."""

    @step
    def one(self):
        _mark(f"{self.run.pk}:one:{self.attempt}")
        time.sleep(self.input.get("sleep", 0.05))

    @step
    def two(self):
        _mark(f"{self.run.pk}:two:{self.attempt}")
        time.sleep(self.input.get("sleep", 0.05))

    @step
    def three(self):
        _mark(f"{self.run.pk}:three:{self.attempt}")
        time.sleep(self.input.get("sleep", 0.05))


class FlowVerbs(pgflow.Workflow):
    """The first step calls the verb named in input["verb"]."""

    @step
    def decide(self):
        verb = self.input.get("verb")
        if verb == "reattempt" and self.attempt < 3:
            self.reattempt()
        if verb in ("pause", "cancel", "skip", "finish"):
            getattr(self, verb)()
        return {"attempt": self.attempt}

    @step
    def after(self):
        return "after"


class Delayed(pgflow.Workflow):
    @step(wait=timedelta(seconds=3600))
    def later(self):
        return "later"


class Guarded(pgflow.Workflow):
    @pgflow.cancel_if
    def stop_requested(self):
        return self.input.get("cancel", False)

    def is_skippable(self):
        return self.input.get("skip", False)

    @step(skip_if="is_skippable")
    def maybe(self):
        return "ran"

    @step
    def last(self):
        return "last"


class Failing(pgflow.Workflow):
    @step
    def boom(self):
        raise RuntimeError("boom")


class Retrying(pgflow.Workflow):
    @step(on_exception=OnException(ConnectionError, action="reattempt", max_reattempts=2, terminal_action="cancel"))
    def flaky(self):
        raise ConnectionError("down")


class RetryingLater(pgflow.Workflow):
    """Retrying, each reattempt a moment later: the worker goes idle in between."""

    @step(
        on_exception=OnException(
            ConnectionError, action="reattempt", wait=timedelta(seconds=0.3), max_reattempts=2, terminal_action="cancel"
        )
    )
    def flaky(self):
        raise ConnectionError("down")


class TimesOut(pgflow.Workflow):
    @step(timeout=timedelta(seconds=0.5))
    def slow(self):
        time.sleep(self.input.get("sleep", 3))
        return "too late"


class WaitsForPayment(pgflow.Workflow):
    @step
    def order(self):
        return "ordered"

    @step(wait_for="payment", wait_timeout=timedelta(seconds=3600), on_timeout="cancel")
    def charge(self, signal):
        return {"paid": signal.payload}

    @step
    def ship(self):
        return "shipped"


class Crashes(pgflow.Workflow):
    """Kills its own worker process: a poison step."""

    @step
    def crash(self):
        os._exit(9)


class Sleeper(pgflow.Workflow):
    @step
    def nap(self):
        _mark(f"{self.run.pk}:nap:{self.attempt}")
        time.sleep(self.input.get("sleep", 2))
        return "rested"


class TwoApprovals(pgflow.Workflow):
    @step(wait_for="approval")
    def first(self, signal):
        return signal.payload

    @step(wait_for="approval")
    def second(self, signal):
        return signal.payload


class ShortWait(pgflow.Workflow):
    @step(wait_for="go", wait_timeout=timedelta(seconds=0.2), on_timeout="skip")
    def wait_a_bit(self, signal):
        return "signalled"

    @step
    def after(self):
        return "after"


class PausesOnWaitTimeout(pgflow.Workflow):
    @step(wait_for="go", wait_timeout=timedelta(seconds=0.2))
    def wait_a_bit(self, signal):
        return "signalled"


class FailsOnceAfterSignal(pgflow.Workflow):
    @step(wait_for="go", on_exception=OnException(action="reattempt"))
    def use(self, signal):
        if self.attempt == 1:
            raise ValueError("first try fails")
        return signal.payload


class ThenWait(pgflow.Workflow):
    @step
    def now(self):
        return "now"

    def reminder_delay(self):
        return timedelta(seconds=120) if self.outputs["now"] == "now" else timedelta(0)

    @step(wait="reminder_delay", queue="mail", priority=3)
    def later(self):
        return "later"


class BadWait(pgflow.Workflow):
    @step
    def first(self):
        return "ok"

    def broken_delay(self):
        raise LookupError("no such customer timezone")

    @step(wait="broken_delay")
    def second(self):
        return "never"


class BadPredicate(pgflow.Workflow):
    def explode(self):
        raise ZeroDivisionError("predicate bug")

    @step(skip_if="explode")
    def guarded(self):
        return "never"


class QueryingPredicate(pgflow.Workflow):
    """A cancel_if whose query fails, as one reading a table its database lacks."""

    @pgflow.cancel_if
    def order_gone(self):
        from django.db import connection  # the project's database, as a condition queries it

        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM no_such_orders_table")
        return False

    @step
    def guarded(self):
        return "never"


class WaitAfterPause(pgflow.Workflow):
    @step
    def first(self):
        return "ok"

    @step(wait=timedelta(hours=1))
    def later(self):
        return "later"


class LogsALine(pgflow.Workflow):
    """Each step writes one log line, as a real body does (tests/acceptance/test_worker_logs.py)."""

    @step
    def first(self):
        logging.getLogger("pgflow.tests").info("run %s: first logged", self.run.pk)

    @step
    def second(self):
        logging.getLogger("pgflow.tests").info("run %s: second logged", self.run.pk)


class CountsItsReads(pgflow.Workflow):
    """Its second step returns the queries its read of ``self.outputs`` cost: none when the
    claim brought them (the worker knew the step reads them)."""

    @step
    def a(self):
        return {"n": 1}

    @step
    def b(self):
        from django.db import connection  # noqa: PLC0415 - the body's own imports
        from django.test.utils import CaptureQueriesContext  # noqa: PLC0415

        with CaptureQueriesContext(connection) as queries:
            n = self.outputs["a"]["n"]
        return {"n": n, "queries": len(queries)}
