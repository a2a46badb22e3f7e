"""Workflows for the exception-policy integration tests."""

from __future__ import annotations

from datetime import timedelta

import pgflow
from pgflow import OnException, step

REPORTED: list[tuple[str, dict]] = []


def collect(error: BaseException, context: dict) -> None:
    """An ERROR_REPORTER that remembers what it heard."""
    REPORTED.append((f"{type(error).__name__}: {error}", context))


def explode(error: BaseException, context: dict) -> None:
    raise RuntimeError("the reporter itself is down")


class PaymentDeclined(Exception):
    pass


class Policies(pgflow.Workflow):
    """input["raise"] picks the error the step raises."""

    on_exception = [
        OnException(PaymentDeclined, action="cancel", report="never"),
        OnException(LookupError, action="skip!"),
        OnException(action="pause"),
    ]

    @step(
        on_exception=[
            {
                "matching": (ConnectionError,),
                "action": "reattempt",
                "wait": timedelta(0),
                "max_reattempts": 2,
                "report": "terminal_only",
            }
        ]
    )
    def act(self):
        kind = self.input.get("raise")
        if kind == "declined":
            raise PaymentDeclined("card declined")
        if kind == "lookup":
            raise KeyError("sku-9")
        if kind == "connection":
            raise ConnectionError("gateway down")
        if kind == "other":
            raise ValueError("bad value")
        return "ok"

    @step
    def after(self):
        return "after"


class Handled(pgflow.Workflow):
    """A handler decides: input["handler"] says which verb, or none, or raise."""

    def choose(self, error):
        how = self.input["handler"]
        if how == "skip":
            self.skip()
        if how == "reattempt" and self.attempt < 2:
            self.reattempt(wait=0)
        if how == "raise":
            raise LookupError("handler broke")
        # "none": calls no verb

    @step(on_exception=OnException(action=None, handler="choose"))
    def act(self):
        raise ValueError(f"attempt {self.attempt} failed")


class Chained(pgflow.Workflow):
    @step
    def act(self):
        kind = self.input["kind"]
        if kind == "long":
            raise ValueError("x" * 20_000)
        if kind == "cycle":
            first = ValueError("first")
            second = KeyError("second")
            first.__cause__ = second
            second.__cause__ = first
            raise first
        if kind == "deep":
            error = None
            for depth in range(7, 0, -1):
                try:
                    raise OSError(f"level {depth}") from error
                except OSError as exc:
                    error = exc
            raise RuntimeError("top") from error
        if kind == "context":
            try:
                {}["missing"]
            except KeyError:
                if self.input.get("suppress"):
                    raise ValueError("while handling") from None
                raise ValueError("while handling")  # noqa: B904 - the implicit __context__ is the point


class Reattempted(pgflow.Workflow):
    @step(on_exception=OnException(action="reattempt"))
    def flaky(self):
        if self.attempt < 3:
            raise ConnectionError(f"attempt {self.attempt}")
        return {"succeeded_on": self.attempt}
