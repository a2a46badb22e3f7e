"""A realistic past for the demo's dashboard: thousands of order runs over the last days.

The rows are written directly (bulk inserts, not the engine) so a history of weeks takes
seconds; they follow the engine's shapes exactly (one row per attempt, the audit trail,
signals, batches), with the mix a shop sees: most orders go through, the payment gateway
flakes and is reattempted, some payments never come and time out, a vendor's inbox
refuses mail and pauses the run, an operator pauses and resumes now and then.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from pgflow import rollup
from pgflow.models import Batch, BatchMember, Event, Signal, Step, WorkflowRun

from .demo import pick_vendors
from .models import Order
from .workflows import OrderFulfilment, fulfilment_key

PATH = OrderFulfilment.workflow_path()
STEPS = [definition.name for definition in OrderFulfilment.steps()]


@dataclass
class _Rows:
    runs: list[WorkflowRun] = field(default_factory=list)
    steps: list[list[Step]] = field(default_factory=list)
    events: list[list[Event]] = field(default_factory=list)
    signals: list[list[Signal]] = field(default_factory=list)
    batches: list[list[tuple[Batch, list[BatchMember]]]] = field(default_factory=list)


def generate(count: int, *, days: int = 7, seed: int | None = None, now: datetime | None = None) -> int:
    """Write ``count`` finished, failed, paused and waiting order runs spread over ``days``,
    then count again the insights' rollup of those hours (the sweep may have rolled them
    already, before these rows were there)."""
    rng = random.Random(seed)
    now = now or timezone.now()
    written = 0
    while written < count:
        chunk = min(500, count - written)
        _write_chunk(rng, chunk, days=days, now=now)
        written += chunk
    rollup.rebuild(now - timedelta(days=days), now)
    return written


def _write_chunk(rng: random.Random, count: int, *, days: int, now: datetime) -> None:
    orders = Order.objects.bulk_create(
        [
            Order(
                customer=rng.choice(["Ada", "Grace", "Linus", "Guido", "Barbara", "Ken"]),
                email=f"history{rng.randrange(10**6)}@example.com",
                total_cents=rng.randint(500, 50_000),
                vendors=pick_vendors(rng),
                status="shipped",
            )
            for _ in range(count)
        ]
    )
    rows = _Rows()
    from django.contrib.contenttypes.models import ContentType

    order_type = ContentType.objects.get_for_model(Order)
    for order in orders:
        start = now - timedelta(seconds=rng.uniform(600, days * 86_400))
        _one_run(rng, rows, order, order_type, start, now)
    with transaction.atomic():
        WorkflowRun.objects.bulk_create(rows.runs)
        for run, steps, events, signals in zip(rows.runs, rows.steps, rows.events, rows.signals, strict=True):
            for item in [*steps, *events, *signals]:
                item.run = run
        Step.objects.bulk_create([s for steps in rows.steps for s in steps])
        for events, steps in zip(rows.events, rows.steps, strict=True):
            by_name = {s.step_name: s for s in steps}
            for event in events:
                event.step = by_name.get(event.details.pop("_step", None))
        Event.objects.bulk_create([e for events in rows.events for e in events])
        for signals, steps in zip(rows.signals, rows.steps, strict=True):
            for signal in signals:
                signal.consumed_by = next(
                    (s for s in steps if s.step_name == "record_payment" and s.status == "completed"), None
                )
        Signal.objects.bulk_create([s for signals in rows.signals for s in signals])
        for run, batches, steps in zip(rows.runs, rows.batches, rows.steps, strict=True):
            for batch, _members in batches:
                batch.run = run
                batch.step = next(s for s in steps if s.step_name == "notify_vendors")
        Batch.objects.bulk_create([b for batches in rows.batches for b, _ in batches])
        for batches in rows.batches:
            for batch, members in batches:
                for member in members:
                    member.batch = batch
        BatchMember.objects.bulk_create([m for batches in rows.batches for _, ms in batches for m in ms])
        for steps, batches in zip(rows.steps, rows.batches, strict=True):
            for batch, _ in batches:
                fan = next(s for s in steps if s.step_name == "notify_vendors")
                fan.batch = batch
        Step.objects.bulk_update(
            [s for steps in rows.steps for s in steps if s.step_name == "notify_vendors"], ["batch"]
        )


def _one_run(rng: random.Random, rows: _Rows, order: Order, order_type: Any, start: datetime, now: datetime) -> None:
    run = WorkflowRun(
        workflow_class=PATH,
        status="running",
        subject_type=order_type,
        subject_id=str(order.pk),
        key=fulfilment_key(order),  # as the demo's live orders and the admin's start action
        input={"gateway_flakiness": 0.3},
        definition_digest=OrderFulfilment.definition_digest(),
        created_at=start,
        updated_at=start,
    )
    steps: list[Step] = []
    events: list[Event] = [Event(event="started", actor="system", details={"workflow": PATH}, created_at=start)]
    signals: list[Signal] = []
    batches: list[tuple[Batch, list[BatchMember]]] = []
    clock = start
    fate = rng.random()

    def attempt(
        name: str,
        number: int,
        *,
        queued: float,
        ran: float,
        status: str = "completed",
        outcome: str = "completed",
        wait: float = 0.0,
        error: dict[str, Any] | None = None,
    ) -> Step:
        nonlocal clock
        created = clock
        scheduled = created + timedelta(seconds=wait)
        started = scheduled + timedelta(seconds=queued)
        finished = started + timedelta(seconds=ran)
        clock = finished
        step = Step(
            step_name=name,
            attempt=number,
            status=status,
            outcome=outcome,
            queue="workflows",
            created_at=created,
            scheduled_at=scheduled,
            started_at=started,
            finished_at=finished,
            worker=f"web-{rng.randint(1, 3)}:{rng.randint(1000, 9999)}",
            **(error or {}),
        )
        steps.append(step)
        return step

    def event(name: str, step_name: str | None = None, actor: str = "system", **details: Any) -> None:
        events.append(Event(event=name, actor=actor, details={**details, "_step": step_name}, created_at=clock))

    def stop(status: str, reason: str = "") -> None:
        run.status = status
        run.updated_at = clock
        if status in ("finished", "cancelled"):
            run.finished_at = clock
        run.paused_reason = reason
        run.current_step = None if status == "finished" else steps[-1].step_name

    def fast() -> float:
        return rng.uniform(0.005, 0.25)

    attempt("reserve_stock", 1, queued=fast(), ran=rng.uniform(0.02, 0.3))
    event("step_completed", "reserve_stock")
    # The payment signal: most come within minutes, some never.
    if fate < 0.04:
        wait_step = attempt("record_payment", 1, queued=fast(), ran=0.0, status="cancelled", outcome="cancelled")
        wait_step.waiting_since = wait_step.started_at
        wait_step.deadline_at = wait_step.started_at + timedelta(minutes=10)
        clock = wait_step.finished_at = wait_step.deadline_at + timedelta(seconds=rng.uniform(1, 9))
        event("timed_out", "record_payment", signal="payment_received", action="cancel")
        event(
            "cancelled",
            "record_payment",
            reason="step record_payment waited for signal 'payment_received' past its deadline",
        )
        stop("cancelled")
        _keep(rows, run, steps, events, signals, batches, now)
        return
    parked = clock + timedelta(seconds=fast())
    arrival = parked + timedelta(seconds=rng.expovariate(1 / 180))
    signals.append(
        Signal(
            name="payment_received",
            payload={"amount_cents": order.total_cents},
            received_at=arrival,
            consumed_at=arrival,
        )
    )
    pay = attempt("record_payment", 1, queued=fast(), ran=0.0)
    pay.waiting_since = pay.started_at
    pay.scheduled_at = arrival
    pay.started_at = arrival + timedelta(seconds=fast())
    clock = pay.finished_at = pay.started_at + timedelta(seconds=rng.uniform(0.01, 0.1))
    pay.output = {"amount_cents": order.total_cents}
    events.append(
        Event(
            event="signal_received",
            actor="webhook",
            details={"name": "payment_received", "payload_bytes": 24, "_step": None},
            created_at=arrival,
        )
    )
    event("step_completed", "record_payment")
    # The flaky gateway: reattempted up to 4 times, 2 s apart.
    flakes = 0
    while rng.random() < 0.3 and flakes < 5:
        flakes += 1
        if flakes == 5:
            break
        attempt(
            "capture_funds",
            flakes,
            queued=fast(),
            ran=rng.uniform(1, 5),
            status="failed",
            outcome="reattempted",
            wait=2.0 if flakes > 1 else 0.0,
            error={
                "error_class": "example_project.shop.workflows.PaymentGatewayDown",
                "error_message": "the payment gateway timed out",
                "error_backtrace": 'Traceback (most recent call last):\n  File "example_project/shop/'
                'workflows.py", line 48, in capture_funds\n'
                "example_project.shop.workflows.PaymentGatewayDown: "
                "the payment gateway timed out",
                "error_causes": [],
            },
        )
        event(
            "step_failed",
            "capture_funds",
            error_class="example_project.shop.workflows.PaymentGatewayDown",
            action="reattempted",
        )
        event("reattempted", "capture_funds", wait=2.0)
    attempt("capture_funds", flakes + 1, queued=fast(), ran=rng.uniform(0.2, 1.5), wait=2.0 if flakes else 0.0)
    event("step_completed", "capture_funds")
    # The vendor fan-out: vendor 13's inbox refuses mail and pauses the run.
    fan = attempt("notify_vendors", 1, queued=fast(), ran=rng.uniform(0.01, 0.05))
    fan.waiting_since = fan.finished_at
    took = rng.uniform(0.3, 4)
    failed = [v for v in order.vendors if v == 13]
    batch = Batch(
        id=uuid.uuid4(),
        description=f"{PATH}#notify_vendors run",
        status="finished",
        total=len(order.vendors),
        succeeded=len(order.vendors) - len(failed),
        failed=len(failed),
        created_at=fan.waiting_since,
        finished_at=fan.waiting_since + timedelta(seconds=took),
    )
    members = [
        BatchMember(
            position=i,
            func="example_project.shop.tasks.notify_vendor",
            args=[order.pk, v],
            status="failed" if v == 13 else "succeeded",
            enqueued_at=batch.created_at,
            finished_at=batch.finished_at,
            error="ConnectionError: vendor 13's inbox refuses mail" if v == 13 else None,
        )
        for i, v in enumerate(order.vendors)
    ]
    batches.append((batch, members))
    clock = fan.finished_at = batch.finished_at
    event("fan_out_opened", "notify_vendors", batch_id=str(batch.id), size=len(members))
    event("fan_out_finished", "notify_vendors", batch_id=str(batch.id), total=len(members), failed=len(failed))
    if failed:
        fan.status, fan.outcome = "failed", "paused"
        fan.error_class, fan.error_message = (
            "pgflow.exceptions.FanOutFailed",
            f"{len(failed)} of {len(members)} jobs failed (batch {batch.id})",
        )
        fan.error_causes = []
        event("step_failed", "notify_vendors", error_class="pgflow.exceptions.FanOutFailed", action="paused")
        event("paused", "notify_vendors", reason=fan.error_message)
        stop("paused", f"step notify_vendors #1 failed: pgflow.exceptions.FanOutFailed: {fan.error_message}")
        _keep(rows, run, steps, events, signals, batches, now)
        return
    event("step_completed", "notify_vendors")
    if fate > 0.97:  # an operator looks into one now and then
        event("paused", None, actor="user:admin", reason="paused by user:admin")
        clock += timedelta(minutes=rng.uniform(2, 40))
        event("resumed", None, actor="user:admin")
    attempt("ship", 1, queued=fast(), ran=rng.uniform(0.05, 0.5))
    event("step_completed", "ship")
    review = attempt("ask_for_review", 1, queued=fast(), ran=rng.uniform(0.01, 0.1), wait=30.0)
    if rng.random() < 0.2:
        review.status, review.outcome = "skipped", "skipped"
        event("skipped", "ask_for_review", reason="skip_if")
    else:
        event("step_completed", "ask_for_review")
    event("finished")
    stop("finished")
    _keep(rows, run, steps, events, signals, batches, now)


def _keep(
    rows: _Rows,
    run: WorkflowRun,
    steps: list[Step],
    events: list[Event],
    signals: list[Signal],
    batches: list[tuple[Batch, list[BatchMember]]],
    now: datetime,
) -> None:
    if run.finished_at and run.finished_at > now:  # too recent to have ended: leave it out
        return
    rows.runs.append(run)
    rows.steps.append(steps)
    rows.events.append(events)
    rows.signals.append(signals)
    rows.batches.append(batches)
