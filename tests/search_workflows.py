"""A checkout for the search and command-line tests (tests/integration/test_cli*.py):
importable by the ``manage.py pgflow`` subprocesses, since runs store their class's path."""

from __future__ import annotations

from datetime import timedelta

import pgflow
from pgflow import step


class CardDeclined(Exception):
    pass


class Checkout(pgflow.Workflow):
    @step
    def reserve(self):
        if self.input.get("decline"):
            raise CardDeclined(f"card declined for customer {self.input['customer']['id']}")
        return {"reserved": len(self.input.get("items", []))}

    @step(wait_for="payment_received", wait_timeout=timedelta(days=2), on_timeout="cancel")
    def charge(self, signal):
        return {"paid": signal.payload["amount"], "currency": signal.payload.get("currency", "EUR")}

    @step
    def ship(self):
        return {"shipped": True}


class Refund(pgflow.Workflow):
    @step
    def refund(self):
        return {"refunded": self.input.get("amount", 0)}
