"""The README's "Testing your workflows": the tour's Checkout, tested with pgflow's pytest
plugin (payment early, late, never; the gateway down). The tests below are the README's
block, line for line (test_the_readme_shows_these_tests keeps them so); only the imports
differ, since the README's Checkout lives in a project's shop/workflows.py."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import mail

import pgflow
from example_project.shop.models import Order
from pgflow import OnException, fan_out, step
from pgflow.models import Alert, ScheduleTick
from pgflow.testing import assert_steps
from tests import pytest_plugin_workflows as pw

NOTIFIED: list[int] = []


# --- the tour's Checkout, as the README's tour declares it -----------------------------------


def reserve(order):
    return True


def send_review_mail(order, *, total):
    mail.send_mail("How was it?", f"You paid {total}.", None, [order.email])


def notify_vendor(vendor_id):
    NOTIFIED.append(vendor_id)  # a django-q2 task in the tour; run inline by the clock here


class Checkout(pgflow.Workflow):
    on_exception = [OnException(ConnectionError, action="reattempt", wait=timedelta(seconds=15), max_reattempts=5)]

    @pgflow.cancel_if  # checked under the run lock before every step
    def order_gone(self):
        return self.subject is None

    @step
    def reserve_stock(self):
        return {"reserved": reserve(self.subject)}  # the output (JSON) is kept

    @step(wait_for="payment_received", wait_timeout=timedelta(days=2), on_timeout="cancel")
    def charge(self, signal):
        return {"paid": signal.payload["amount"]}

    @fan_out(on_batch_failure="pause")
    def notify_vendors(self, batch):
        for vendor_id in self.input["vendors"]:
            batch.add("tests.integration.test_pytest_plugin_readme.notify_vendor", vendor_id)

    @step(wait=timedelta(days=3), skip_if="already_reviewed")
    def ask_for_review(self):
        send_review_mail(self.subject, total=self.outputs["charge"]["paid"])

    def already_reviewed(self):
        return self.subject.reviewed  # self.subject is your Order


# --- the README's block ------------------------------------------------------------------------


def checkout():
    order = Order.objects.create(customer="ada", email="ada@example.com", total_cents=4200)
    return Checkout.start(subject=order, input={"vendors": [3, 7]}, key=f"order-{order.pk}")


def test_paid_before_the_charge_waits(db, pgflow_clock):
    run = checkout()
    pgflow.signal(run, "payment_received", {"amount": 4200})  # kept until charge waits for it
    pgflow_clock.run_due()  # runs what is due now, here
    assert_steps(run, ["reserve_stock", "charge", "notify_vendors", "ask_for_review:scheduled"])
    pgflow_clock.advance(days=3)
    assert_steps(run, ["reserve_stock", "charge", "notify_vendors", "ask_for_review:completed"])
    run.refresh_from_db()
    assert run.status == "finished" and run.outputs["charge"] == {"paid": 4200}
    assert mail.outbox[0].body == "You paid 4200."


def test_paid_a_day_late(db, pgflow_clock):
    run = checkout()
    pgflow_clock.advance(days=1)
    assert_steps(run, ["reserve_stock", "charge:waiting"])
    pgflow.signal(run, "payment_received", {"amount": 4200})
    pgflow_clock.advance(days=3)
    assert_steps(run, ["reserve_stock", "charge", "notify_vendors", "ask_for_review"])
    run.refresh_from_db()
    assert run.status == "finished"


def test_never_paid(db, pgflow_clock):
    run = checkout()
    pgflow_clock.advance(days=2)  # charge's wait_timeout: on_timeout="cancel"
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert_steps(run, ["reserve_stock", "charge:cancelled"])
    assert mail.outbox == []


def test_the_gateway_down(db, pgflow_clock, pgflow_replace_step):
    def charge(self, signal):
        raise ConnectionError("gateway down")

    pgflow_replace_step(Checkout, "charge", charge)  # until the test ends
    run = checkout()
    pgflow.signal(run, "payment_received", {"amount": 4200})
    pgflow_clock.run_due()
    for _ in range(5):
        pgflow_clock.advance(seconds=15)  # reattempted after 15 s, five times, then paused
    run.refresh_from_db()
    assert run.status == "paused"
    assert_steps(run, ["reserve_stock"] + ["charge:failed"] * 6)


@pytest.fixture(autouse=True)
def _nightly():
    """The README's Nightly, from tests/pytest_plugin_workflows.py, registered for each test
    only (see that module)."""
    global Nightly
    with pw.declared(pw.Nightly) as Nightly:
        yield


def test_after_three_days_down_the_last_night_is_caught_up(db, pgflow_clock):
    pgflow_clock.advance(days=3)  # three 03:00 ticks at once: within catch_up (a day) one starts
    assert [run.status for run in Nightly.runs()] == ["finished"]
    missed = ScheduleTick.objects.get(schedule__workflow_class=Nightly.workflow_path(), outcome="missed")
    assert missed.details["count"] == 2


def test_every_night_starts_when_the_days_pass_one_by_one(db, pgflow_clock):
    for _ in range(3):
        pgflow_clock.advance(days=1)
    assert Nightly.runs().count() == 3


def test_an_alert_waits_its_cooldown(db, pgflow_clock, settings):
    rule = {"name": "paused", "kind": "runs_paused", "count": 0, "cooldown": timedelta(minutes=30)}
    settings.PGFLOW = {**settings.PGFLOW, "ALERTS": [{**rule, "targets": ["mail_admins"]}]}
    run = checkout()
    pgflow_clock.run_due()  # charge waits for the payment
    run.pause()
    pgflow_clock.advance(minutes=1)  # the rule holds: it fires
    run.resume()
    pgflow_clock.advance(minutes=1)  # it resolves
    run.pause()
    pgflow_clock.advance(minutes=10)  # it holds again, within the cooldown
    assert Alert.objects.filter(rule__name="paused").count() == 1
    pgflow_clock.advance(minutes=20)  # 32 minutes after the first firing
    assert Alert.objects.filter(rule__name="paused").count() == 2


# --- the README shows these tests ----------------------------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shows_these_tests():
    section = README.read_text().split("## Testing your workflows", 1)[1].split("\n## ", 1)[0]
    blocks = [block for block in re.findall(r"```python\n(.*?)```", section, re.S) if "def test_" in block]
    assert len(blocks) == 2
    sources = Path(__file__).read_text() + (README.parent / "tests" / "pytest_plugin_workflows.py").read_text()
    for block in blocks:
        body = block[re.search(r"^(def|class) ", block, re.M).start() :]
        for chunk in re.split(r"\n\n\n(?=def |class )", body):
            assert chunk.strip() in sources, f"the README's tests and this file's have drifted apart:\n{chunk}"
