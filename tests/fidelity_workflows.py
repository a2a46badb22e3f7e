"""Workflows written as a pgbus user would: verbs inside ``except Exception``, helpers named
like the engine's own, matchers by bare and re-exported names, fan-out outputs."""

from __future__ import annotations

from django.db import IntegrityError

import pgflow
from pgflow import OnException, cancel_if, fan_out, step

SWALLOWED: list[str] = []  # what an `except Exception` around a verb caught


class Guarded(pgflow.Workflow):
    """input["verb"] is called inside a try/except Exception that would swallow an Exception."""

    @step
    def fetch(self):
        verb = self.input["verb"]
        try:
            if verb == "reattempt" and self.attempt > 1:
                return "second attempt"
            getattr(self, verb)()
        except Exception as exc:  # a flaky-call wrapper, as a user writes it
            SWALLOWED.append(type(exc).__name__)
            return "kept running"
        return "unreachable"

    @step
    def after(self):
        return "after"


class GuardedHandler(pgflow.Workflow):
    """A policy handler that calls its verb inside try/except Exception."""

    on_exception = [OnException(ValueError, handler="recover")]

    def recover(self, error):
        try:
            self.skip()
        except Exception as exc:
            SWALLOWED.append(type(exc).__name__)

    @step
    def fail(self):
        raise ValueError("flaky")

    @step
    def after(self):
        return "after"


class OwnHelpers(pgflow.Workflow):
    """Helpers named like the engine's old methods, used as the step options they name."""

    def should_skip(self):
        return self.input.get("skip", False)

    def should_cancel(self):
        return self.input.get("cancel", False)

    def delay_seconds(self):
        return 0

    def invoke(self):
        return "the user's invoke"

    def decide(self):
        return "the user's decide"

    @cancel_if
    def gone(self):
        return self.should_cancel()

    @step(skip_if="should_skip", wait="delay_seconds")
    def maybe(self):
        return self.invoke()

    @step
    def last(self):
        return self.decide()


class VerbInCondition(pgflow.Workflow):
    """A cancel_if condition that calls the verb itself instead of returning True."""

    @cancel_if
    def gone(self):
        if self.input.get("gone"):
            self.cancel()
        return False

    @step
    def only(self):
        return "ran"


class FanOutOutput(pgflow.Workflow):
    """A fan_out whose body returns input["returns"] (nothing when absent)."""

    @fan_out
    def notify(self, batch):
        for number in self.input.get("numbers", []):
            batch.add("tests.fanout_tasks.double", number)
        returns = self.input.get("returns")
        return {1, 2} if returns == "set" else returns  # a set is no JSON value

    @step
    def after(self):
        return {"seen": self.outputs["notify"]}


class Retryable:
    """A tag class mixed into errors that are worth another try."""


class GatewayBusy(Retryable, ConnectionError):
    pass


class PaymentDeclined(Exception):
    pass


class NamedMatchers(pgflow.Workflow):
    """Policies matching by bare name, by a re-exported path and by a tag class."""

    on_exception = [
        OnException("PaymentDeclined", action="cancel", report="never"),
        OnException(["django.db.IntegrityError", [Retryable]], action="skip"),
    ]

    @step
    def act(self):
        kind = self.input["raise"]
        if kind == "declined":
            raise PaymentDeclined("card declined")
        if kind == "integrity":
            raise IntegrityError("duplicate key value violates unique constraint")  # django.db.utils's
        if kind == "busy":
            raise GatewayBusy("try later")
        raise ValueError("other")

    @step
    def after(self):
        return "after"


class Validates(pgflow.Workflow):
    """The body's error is raised inside Django's validators."""

    @step
    def check_email(self):
        from django.core.validators import validate_email

        validate_email(self.input["email"])  # the line error_backtrace must show


def innermost_only(frames):
    """A BACKTRACE_CLEANER: only the frame that raised."""
    return frames[-1:]
