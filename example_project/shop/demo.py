"""Example runs for the demo: orders at every stage, some waiting for a payment signal."""

from __future__ import annotations

import random

from django.db import transaction

import pgflow

from .models import Order
from .workflows import OrderFulfilment, RefundApproval

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
            run = OrderFulfilment.start(subject=order, input={"gateway_flakiness": 0.3, "declined": rng.random() < 0.1})
        started += 1
        if rng.random() < 0.75:
            pgflow.signal(run, "payment_received", {"amount_cents": order.total_cents}, actor="demo")
        if number % 4 == 0:
            RefundApproval.start(input={"amount_cents": order.total_cents})
            started += 1
    return started


def pick_vendors(rng: random.Random) -> list[int]:
    """One to three vendors; now and then vendor 13, whose inbox refuses mail."""
    return rng.sample([1, 2, 3, 4, 5], k=rng.randint(1, 3)) + ([13] if rng.random() < 0.08 else [])
