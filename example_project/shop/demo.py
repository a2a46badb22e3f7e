"""Example runs for the demo: orders at every stage, some waiting for a payment signal."""

from __future__ import annotations

import random
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

import pgflow

from .models import Order
from .workflows import OrderFulfilment, RefundApproval, Restock, fulfilment_key

CUSTOMERS = ["Ada", "Grace", "Linus", "Guido", "Barbara", "Ken", "Margaret", "Dennis"]


def start_example_runs(count: int) -> int:
    """Place ``count`` orders (each with its workflow run); pay for most of them."""
    rng = random.Random()
    started = 0
    for number in range(count):
        with transaction.atomic():
            order = Order.objects.create(
                customer=rng.choice(CUSTOMERS),
                email=f"customer{number}@example.com",
                total_cents=rng.randint(500, 50_000),
                vendors=pick_vendors(rng),
            )
            run = OrderFulfilment.start(
                subject=order,
                input={"gateway_flakiness": 0.3, "declined": rng.random() < 0.1},
                key=fulfilment_key(order),
            )
        started += 1
        if rng.random() < 0.75:
            pgflow.signal(run, "payment_received", {"amount_cents": order.total_cents}, actor="demo")
        if number % 4 == 0:
            RefundApproval.start(subject=order, input={"amount_cents": order.total_cents})
            started += 1
    Restock.start(input={"items": ["mugs", "tea", "filters"]})  # a parent and its three child runs
    return started + 1


def fill_admin_sections(admin: object) -> list[str]:
    """A schedule, an alert rule and an MCP token, so no admin section of the demo is empty
    (child runs come from Restock)."""
    # lazy: the demo's own set-up, never imported by the shop's workflows or the worker
    from pgflow import schedules
    from pgflow.models import AccessToken, AlertRule, Schedule
    from pgflow_dashboard.mcp import tokens

    made = []
    if not Schedule.objects.filter(name="restock every 15 minutes").exists():
        schedules.save(
            Schedule(workflow_class=Restock.workflow_path(), name="restock every 15 minutes", cron="*/15 * * * *")
        )
        made.append("a schedule (Restock every 15 minutes)")
    if not AlertRule.objects.filter(name="demo: any run paused").exists():
        AlertRule.objects.create(
            name="demo: any run paused",
            kind="runs_paused",
            params={"count": 0, "workflow_class": None},
            targets=["mail_admins"],
            cooldown=timedelta(minutes=30),
            created_at=timezone.now(),
        )
        made.append("an alert rule (any run paused, mailed to the admins)")
    if not AccessToken.objects.filter(name="demo agent").exists():
        tokens.issue(admin, "demo agent")
        made.append("an MCP token 'demo agent' for the admin (its secret is not kept; make your own in the admin)")
    return made


def pick_vendors(rng: random.Random) -> list[int]:
    """One to three vendors; now and then vendor 13, whose inbox refuses mail."""
    return rng.sample([1, 2, 3, 4, 5], k=rng.randint(1, 3)) + ([13] if rng.random() < 0.08 else [])
