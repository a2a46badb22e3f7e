"""The shop's workflows: every pgflow feature in a realistic place."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from django import forms

import pgflow
from pgflow import OnException, fan_out, step


class PaymentGatewayDown(ConnectionError):
    """The payment provider did not answer; worth retrying."""


class CardDeclined(Exception):
    """The customer's card was refused; retrying will not help."""


def fulfilment_key(order: Any) -> str:
    """One fulfilment per order: the demo and the admin's start action use the same key."""
    return f"fulfil-order-{order.pk}"


class OrderFulfilment(pgflow.Workflow):
    """An order from placement to the review reminder."""

    queue = "workflows"
    on_exception = [
        OnException(PaymentGatewayDown, action="reattempt", wait=timedelta(seconds=2), max_reattempts=4),
        OnException(CardDeclined, action="cancel", report="never"),
    ]

    @pgflow.cancel_if
    def order_cancelled(self):
        # The customer cancelled in the shop: stop wherever the run is.
        return self.subject is None or self.subject.status == "cancelled"

    @step
    def reserve_stock(self):
        return {"reserved": len(self.subject.vendors)}

    @step(wait_for="payment_received", wait_timeout=timedelta(minutes=10), on_timeout="cancel")
    def record_payment(self, signal):
        self.subject.status = "paid"
        self.subject.save(update_fields=["status"])
        return {"amount_cents": signal.payload.get("amount_cents")}

    @step(timeout=timedelta(seconds=30))
    def capture_funds(self):
        # A flaky external call: the class policy reattempts PaymentGatewayDown.
        if random.random() < self.input.get("gateway_flakiness", 0.3):
            raise PaymentGatewayDown("the payment gateway timed out (a deliberate demo failure: reattempted)")
        if self.input.get("declined"):
            raise CardDeclined("card declined by the issuer (a deliberate demo failure: the order is cancelled)")
        return {"captured": True}

    @fan_out(on_batch_failure="pause")
    def notify_vendors(self, batch):
        for vendor_id in self.subject.vendors:
            batch.add("example_project.shop.tasks.notify_vendor", self.subject.pk, vendor_id)

    @step
    def ship(self):
        self.subject.status = "shipped"
        self.subject.save(update_fields=["status"])
        return {"carrier": "parcelpost"}

    @step(wait=timedelta(seconds=30), skip_if="already_reviewed")
    def ask_for_review(self):
        return {"mailed": self.subject.email}

    def already_reviewed(self):
        return self.subject.reviewed


class RefundForm(forms.Form):
    amount_cents = forms.IntegerField(min_value=1, help_text="how much to refund, in cents")


class RefundApproval(pgflow.Workflow):
    """A refund waits for a person to approve it in the admin (send the signal 'approved')."""

    # What the admin's "Start RefundApproval" action asks for (pgflow_dashboard.admin.start_workflow_action).
    input_form = RefundForm

    @step
    def open_ticket(self):
        return {"ticket": f"R-{self.run.pk}"}

    @step(wait_for="approved", wait_timeout=timedelta(hours=1), on_timeout="pause")
    def wait_for_approval(self, signal):
        if not signal.payload or not signal.payload.get("ok"):
            self.cancel()
        return {"approved_by": signal.payload.get("by")}

    @step(on_exception=OnException(action="reattempt", wait=timedelta(seconds=5), max_reattempts=3))
    def refund(self):
        return {"refunded": self.input.get("amount_cents", 0)}


class Restock(pgflow.Workflow):
    """One child run per low item, waited for as one fan-out batch, so the dashboard shows a
    parent and its children; the demo schedules it every 15 minutes (an admin schedule)."""

    @fan_out
    def restock_items(self, batch):
        for item in self.input.get("items", ["mugs", "tea", "filters"]):
            batch.add_run(RestockItem, input={"item": item}, key=f"restock-{self.run.pk}-{item}")
        return {"items": len(self.input.get("items", ["mugs", "tea", "filters"]))}


class RestockItem(pgflow.Workflow):
    """One item reordered from its supplier: a child run of Restock."""

    @step
    def reorder(self):
        return {"reordered": self.input["item"]}
