"""The insights figures, exactly: rows seeded at known instants, a fixed window end.

Rows are written directly (the engine cannot be asked to fail at 11:55 yesterday); each
helper fills only what a real row of that state would have.
"""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from pgflow import rollup
from pgflow.core import histogram, phases
from pgflow.models import Step, WorkflowRun
from pgflow.runtime import presence
from pgflow_dashboard import insights
from pgflow_dashboard.window import WorkflowWindow
from tests import dashboard_workflows as dw

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 15, 12, 30, tzinfo=UTC)
A = "shop.flows.Alpha"
B = "shop.flows.Beta"
LATER = dw.Later.workflow_path()


def at(hours: float = 0, *, minutes: float = 0, seconds: float = 0) -> datetime:
    """NOW minus the given time."""
    return NOW - timedelta(hours=hours, minutes=minutes, seconds=seconds)


def make_run(
    path: str = A,
    *,
    status: str = "running",
    created: datetime,
    finished: datetime | None = None,
    digest: str = "d" * 64,
    current_step: str | None = "one",
    paused_reason: str = "",
) -> WorkflowRun:
    return WorkflowRun.objects.create(
        workflow_class=path,
        status=status,
        created_at=created,
        updated_at=finished or created,
        finished_at=finished,
        definition_digest=digest,
        current_step=current_step,
        paused_reason=paused_reason,
    )


def make_step(
    run: WorkflowRun,
    name: str = "one",
    *,
    status: str,
    created: datetime,
    scheduled: datetime | None = None,
    started: datetime | None = None,
    finished: datetime | None = None,
    outcome: str = "",
    **extra: Any,
) -> Step:
    return Step.objects.create(
        run=run,
        step_name=name,
        status=status,
        outcome=outcome,
        queue="workflows",
        created_at=created,
        scheduled_at=scheduled or created,
        started_at=started,
        finished_at=finished,
        **extra,
    )


def window(name: str = "24h", *, retention: timedelta | None = timedelta(days=30)) -> WorkflowWindow:
    return WorkflowWindow.parse(name, retention=retention, now=NOW)


def by_start(buckets: list[dict[str, Any]]) -> dict[datetime, dict[str, Any]]:
    return {bucket["start"]: bucket for bucket in buckets}


def hour(day: int, hour: int) -> datetime:
    return datetime(2030, 1, day, hour, tzinfo=UTC)


# --- runs and failures per bucket --------------------------------------------------------------


def test_runs_started_and_ended_per_hour_bucket_in_24h():
    make_run(created=at(1, minutes=20))  # 11:10
    make_run(created=at(0, minutes=40), status="finished", finished=at(0, minutes=35))  # 11:50, ended 11:55
    make_run(created=at(10, minutes=25))  # 02:05
    make_run(created=at(23, minutes=50))  # yesterday 12:40: the first, partial bucket
    make_run(created=at(24, minutes=30))  # yesterday 12:00: before the window starts
    make_run(created=at(30), status="cancelled", finished=at(0, minutes=20))  # started earlier, ended 12:10
    make_run(created=at(30), status="finished", finished=at(25))  # ended before the window

    buckets = insights.runs_per_bucket(window())
    assert len(buckets) == 25  # yesterday 12:00 … today 12:00, the last still filling
    assert buckets[0]["start"] == hour(14, 12) and buckets[-1]["start"] == hour(15, 12)
    table = by_start(buckets)
    assert table[hour(15, 11)] == {"start": hour(15, 11), "started": 2, "finished": 1, "cancelled": 0}
    assert table[hour(15, 12)] == {"start": hour(15, 12), "started": 0, "finished": 0, "cancelled": 1}
    assert table[hour(15, 2)]["started"] == 1
    assert table[hour(14, 12)]["started"] == 1
    assert sum(b["started"] for b in buckets) == 4
    assert sum(b["finished"] for b in buckets) == 1
    assert sum(b["cancelled"] for b in buckets) == 1


def test_failures_per_bucket_by_action_and_the_top_errors():
    run = make_run(created=at(20))
    failures = [
        (at(0, minutes=5), "reattempted", "ConnectionError"),  # 12:25
        (at(0, minutes=10), "reattempted", "ConnectionError"),  # 12:20
        (at(0, minutes=15), "paused", "ValueError"),  # 12:15
        (at(3, minutes=10), "cancelled", "PaymentDeclined"),  # 09:20
        (at(3, minutes=20), "lost", "pgflow.WorkerLost"),  # 09:10: counted, no action column
        (at(26), "paused", "ValueError"),  # before the window
    ]
    for finished, outcome, error_class in failures:
        make_step(
            run,
            status="failed",
            outcome=outcome,
            created=finished - timedelta(seconds=3),
            started=finished - timedelta(seconds=1),
            finished=finished,
            error_class=error_class,
        )
    make_step(run, status="completed", outcome="completed", created=at(1), started=at(1), finished=at(1))
    make_step(run, status="skipped", outcome="skipped", created=at(1), started=at(1), finished=at(1))

    table = by_start(insights.step_failures_per_bucket(window()))
    assert table[hour(15, 12)] == {
        "start": hour(15, 12),
        "failures": 3,
        "reattempted": 2,
        "paused": 1,
        "cancelled": 0,
        "skipped": 0,
    }
    assert table[hour(15, 9)] == {
        "start": hour(15, 9),
        "failures": 2,
        "reattempted": 0,
        "paused": 0,
        "cancelled": 1,
        "skipped": 0,
    }
    assert sum(b["failures"] for b in table.values()) == 5
    assert insights.top_errors(window()) == [
        {"error_class": "ConnectionError", "count": 2},
        {"error_class": "PaymentDeclined", "count": 1},
        {"error_class": "ValueError", "count": 1},
        {"error_class": "pgflow.WorkerLost", "count": 1},
    ]
    assert insights.top_errors(window(), limit=1) == [{"error_class": "ConnectionError", "count": 2}]


# --- per workflow class ---------------------------------------------------------------------------


def test_per_class_counts_success_rate_and_duration_percentiles():
    """started: runs started in the window; running / paused: of those, now; finished,
    cancelled, success rate and durations: runs that ended in the window."""
    for seconds in (10, 30):
        created = at(2)
        make_run(A, status="finished", created=created, finished=created + timedelta(seconds=seconds))
    make_run(A, status="cancelled", created=at(3), finished=at(2))
    make_run(A, status="running", created=at(1))
    make_run(A, status="finished", created=at(30), finished=at(1))  # started before the window, ended in it
    make_run(A, status="finished", created=at(30), finished=at(26))  # ended before the window
    make_run(A, status="running", created=at(30))  # open, but started before the window
    make_run(A, status="paused", created=at(29))  # likewise
    make_run(B, status="paused", created=at(1), paused_reason="why")

    rows = {row["workflow_class"]: row for row in insights.workflows(window())}
    alpha = rows[A]
    assert {k: alpha[k] for k in ("started", "running", "paused", "finished", "cancelled")} == {
        "started": 4,
        "running": 1,
        "paused": 0,
        "finished": 3,
        "cancelled": 1,
    }
    assert alpha["success_rate"] == pytest.approx(3 / 4)
    durations = [10.0, 30.0, 29 * 3600.0]
    tolerance = histogram.MAX_RELATIVE_ERROR
    assert alpha["p50_seconds"] == pytest.approx(statistics.median(durations), rel=tolerance)
    assert alpha["p95_seconds"] == pytest.approx(30 + 0.9 * (29 * 3600 - 30), rel=tolerance)
    beta = rows[B]
    assert (beta["started"], beta["paused"], beta["success_rate"], beta["p50_seconds"]) == (1, 1, None, None)
    assert list(rows) == [A, B]


def test_a_class_with_runs_that_only_ended_in_the_window_is_listed():
    make_run(B, status="cancelled", created=at(40), finished=at(3))
    (row,) = insights.workflows(window())
    assert (row["workflow_class"], row["started"], row["cancelled"], row["success_rate"]) == (B, 0, 1, 0.0)


# --- per step ----------------------------------------------------------------------------------------


def test_per_step_counts_the_attempts_that_ended_in_the_window_and_their_phases():
    run = make_run(created=at(5))
    t = at(4)
    s = timedelta(seconds=1)
    make_step(
        run,
        status="completed",
        outcome="completed",
        created=t,
        scheduled=t + 10 * s,
        started=t + 12 * s,
        finished=t + 15 * s,
    )  # waited 10, queued 2, ran 3
    make_step(
        run,
        status="failed",
        outcome="reattempted",
        created=t,
        scheduled=t,
        started=t + 4 * s,
        finished=t + 5 * s,
        error_class="E",
    )  # waited 0, queued 4, ran 1
    old = at(30)
    make_step(
        make_run(created=at(31)),
        status="completed",
        outcome="completed",
        created=old,
        scheduled=old + 6 * s,
        started=old + 7 * s,
        finished=at(2),
    )  # created before the window, ended in it: waited 6, queued 1
    make_step(
        make_run(created=at(5)),
        status="cancelled",
        outcome="paused",
        created=t,
        scheduled=t + 3600 * s,
        finished=t + 20 * s,
    )  # closed before it was due: waited 20, never queued nor ran
    other = make_run(created=at(5))
    make_step(
        other, status="waiting", created=t, scheduled=t + s, started=t + 2 * s, waiting_since=t + 5 * s
    )  # open (parked after its body): not counted until it ends
    make_step(make_run(created=at(5)), status="scheduled", created=t, scheduled=t + 3600 * s)  # open
    make_step(
        make_run(created=at(5)),
        "two",
        status="completed",
        outcome="completed",
        created=at(30),
        started=at(30),
        finished=at(29),
    )  # ended before the window

    (row,) = insights.steps(window())
    assert (row["workflow_class"], row["step_name"], row["attempts"], row["failures"]) == (A, "one", 4, 1)
    ran_long = (at(2) - (old + 7 * s)).total_seconds()
    tolerance = histogram.MAX_RELATIVE_ERROR
    # percentile_cont interpolates between ranks: waited [0, 6, 10, 20], queued [1, 2, 4], ran [1, 3, ran_long]
    assert row["waited_p50_seconds"] == pytest.approx(8.0, rel=tolerance)
    assert row["waited_p95_seconds"] == pytest.approx(10 + 0.85 * 10, rel=tolerance)
    assert row["queued_p50_seconds"] == pytest.approx(2.0, rel=tolerance)
    assert row["queued_p95_seconds"] == pytest.approx(2 + 0.9 * 2, rel=tolerance)
    assert row["ran_p50_seconds"] == pytest.approx(3.0, rel=tolerance)
    assert row["ran_p95_seconds"] == pytest.approx(3 + 0.9 * (ran_long - 3), rel=tolerance)


def test_step_phases_in_sql_agree_with_the_pure_rule():
    """The rollup's SQL split of an attempt into waited / throttled / queued / ran is
    pgflow.core.phases' (the timeline's), phase by phase, on attempts of every shape that
    ran (the histograms count the phases of claimed attempts)."""
    t = at(2)
    s = timedelta(seconds=1)
    shapes = [
        # plain: waited 7, queued 2, ran 5
        {"status": "completed", "created": t, "scheduled": t + 7 * s, "started": t + 9 * s, "finished": t + 14 * s},
        # a signal step woken by its signal: waited 1 (to the park), waiting 19, queued 3, ran 2
        {
            "status": "completed",
            "created": t,
            "waiting_since": t + s,
            "scheduled": t + 20 * s,
            "started": t + 23 * s,
            "finished": t + 25 * s,
        },
        # held by a limit: waited 3, throttled 40, queued 1, ran 2
        {
            "status": "completed",
            "created": t,
            "scheduled": t + 3 * s,
            "throttled_until": t + 43 * s,
            "started": t + 44 * s,
            "finished": t + 46 * s,
        },
        # a limit let it through at once: waited 0, throttled 0, queued 2, ran 1
        {
            "status": "failed",
            "created": t,
            "scheduled": t,
            "throttled_until": t,
            "started": t + 2 * s,
            "finished": t + 3 * s,
        },
        # parked after its body on a batch, then completed: waited 2, queued 1, ran 6, waiting 30
        {
            "status": "completed",
            "created": t,
            "scheduled": t + 2 * s,
            "started": t + 3 * s,
            "waiting_since": t + 9 * s,
            "finished": t + 39 * s,
        },
    ]
    for index, shape in enumerate(shapes):
        make_step(make_run(created=at(3)), f"shape{index}", outcome="completed", **shape)
    rows = {row["step_name"]: row for row in insights.steps(window())}
    for index, step in enumerate(Step.objects.order_by("step_name").values()):
        expected = phases.of_attempt(
            created=step["created_at"],
            scheduled=step["scheduled_at"],
            started=step["started_at"],
            waiting_since=step["waiting_since"],
            finished=step["finished_at"],
            throttled_until=step["throttled_until"],
        )
        row = rows[f"shape{index}"]
        for phase in phases.ROLLED:
            if expected[phase] is None:  # not throttled: no figure
                assert row[f"{phase}_p50_seconds"] is None, (index, phase)
                continue
            # One attempt: its histogram's one bucket, estimated at the bucket's middle.
            low, high = histogram.bounds(histogram.bucket(expected[phase]))
            assert row[f"{phase}_p50_seconds"] == pytest.approx((low + high) / 2), (index, phase)
            assert low <= expected[phase] < high or low == expected[phase] == high  # 0 s: the zero bucket


def test_estimated_percentiles_stay_within_the_stated_error_of_postgresqls():
    """Many attempts spread over four orders of magnitude: p50 and p95 of each phase are
    within MAX_RELATIVE_ERROR of percentile_cont over the same rows."""
    rng = random.Random(11)
    run = make_run(created=at(10))
    for _ in range(300):
        created = at(rng.uniform(1, 20))
        scheduled = created + timedelta(seconds=rng.choice([0, rng.uniform(0.01, 100)]))
        started = scheduled + timedelta(seconds=rng.expovariate(2))
        make_step(
            run,
            status="completed",
            outcome="completed",
            created=created,
            scheduled=scheduled,
            started=started,
            finished=started + timedelta(seconds=10 ** rng.uniform(-2.5, 2)),
        )
    exact_sql = ", ".join(
        f"percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY extract(epoch FROM {b} - {a}))"
        for a, b in (("created_at", "scheduled_at"), ("scheduled_at", "started_at"), ("started_at", "finished_at"))
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {exact_sql} FROM pgflow_step")
        exact = dict(zip(("waited", "queued", "ran"), cursor.fetchone(), strict=True))
    (row,) = insights.steps(window())
    assert row["attempts"] == 300
    for phase, (p50, p95) in exact.items():
        assert row[f"{phase}_p50_seconds"] == pytest.approx(p50, rel=histogram.MAX_RELATIVE_ERROR), phase
        assert row[f"{phase}_p95_seconds"] == pytest.approx(p95, rel=histogram.MAX_RELATIVE_ERROR), phase
        assert row[f"{phase}_p50_seconds"] != p50  # estimated, not computed exactly (else this proves nothing)


# --- stuck -------------------------------------------------------------------------------------------


def test_the_stuck_list():
    make_run(status="paused", created=at(5), paused_reason="step one #1 failed: ValueError: no")
    make_run(status="paused", created=at(3), paused_reason="paused by user:ops")
    overdue = make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=at(0, minutes=10))
    make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=at(0, minutes=1))  # due 1 min
    make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=NOW + timedelta(hours=1))
    lost = make_step(
        make_run(created=at(1)),
        status="in_progress",
        created=at(1),
        started=at(1),
        worker="w1",
        lease_expires_at=at(0, seconds=1),
    )
    make_step(
        make_run(created=at(1)),
        status="in_progress",
        created=at(1),
        started=at(1),
        worker="w2",
        lease_expires_at=NOW + timedelta(seconds=30),
    )
    late = make_step(
        make_run(created=at(2)), status="waiting", created=at(2), started=at(2), waiting_since=at(2), deadline_at=at(1)
    )
    make_step(make_run(created=at(2)), status="waiting", created=at(2), started=at(2), waiting_since=at(2))

    stuck = insights.stuck(NOW)
    assert stuck["paused"]["count"] == 2
    assert [row["paused_reason"] for row in stuck["paused"]["rows"]] == [
        "step one #1 failed: ValueError: no",
        "paused by user:ops",
    ]  # oldest first
    assert stuck["overdue"]["count"] == 1
    assert stuck["overdue"]["rows"][0]["step_id"] == overdue.pk
    assert stuck["overdue"]["rows"][0]["due_at"] == at(0, minutes=10)
    assert stuck["lease_expired"]["count"] == 1
    assert stuck["lease_expired"]["rows"][0]["step_id"] == lost.pk
    assert stuck["deadline_passed"]["count"] == 1
    assert stuck["deadline_passed"]["rows"][0]["run_id"] == late.run_id
    # Bounded lists, exact counts.
    limited = insights.stuck(NOW, limit=1)
    assert limited["paused"]["count"] == 2 and len(limited["paused"]["rows"]) == 1


def test_overdue_attempts_are_the_oldest_of_every_queue_exactly_counted():
    # Read one queue at a time along pgflow_step_due: the list must still be the oldest of all
    # queues together, and the count every one of them.
    due = {}
    for queue, minutes in [("mail", 50), ("mail", 20), ("reports", 40), ("reports", 10), ("bulk", 30), ("bulk", 6)]:
        step = make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=at(0, minutes=minutes))
        Step.objects.filter(pk=step.pk).update(queue=queue)
        due[step.pk] = at(0, minutes=minutes)
    make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=at(0, minutes=4))  # not yet
    make_step(make_run(created=at(1)), status="in_progress", created=at(1), scheduled=at(0, minutes=55))  # claimed

    overdue = insights.overdue_steps(NOW, limit=3)
    assert overdue["count"] == 6
    assert [row["due_at"] for row in overdue["rows"]] == [at(0, minutes=50), at(0, minutes=40), at(0, minutes=30)]
    assert [row["queue"] for row in overdue["rows"]] == ["mail", "reports", "bulk"]
    assert all(due[row["step_id"]] == row["due_at"] for row in overdue["rows"])
    assert insights.overdue_steps(NOW, limit=3, scheduled=["reports"])["count"] == 2  # the queues given only
    WorkflowRun.objects.filter(pk__in=Step.objects.filter(queue="mail").values("run_id")).update(tenant="acme")
    mine = insights.overdue_steps(NOW, limit=1, tenants=["acme"])
    assert mine["count"] == 2 and [row["due_at"] for row in mine["rows"]] == [at(0, minutes=50)]


def test_queues_without_a_worker_count_what_is_due_now_or_before():
    later = NOW + timedelta(seconds=1)
    for queue, due in [("mail", at(0, minutes=9)), ("mail", NOW), ("mail", later), ("bulk", at(1))]:
        step = make_step(make_run(created=at(1)), status="scheduled", created=at(1), scheduled=due)
        Step.objects.filter(pk=step.pk).update(queue=queue)
    presence.register(name="w", queues=["bulk"], concurrency=1, at=NOW)

    found = insights.queues_without_worker(NOW, limit=5)
    assert found == {"count": 1, "rows": [{"queue": "mail", "due": 2, "oldest_due_at": at(0, minutes=9)}]}
    WorkflowRun.objects.filter(pk=Step.objects.get(queue="mail", scheduled_at=NOW).run_id).update(tenant="acme")
    mine = insights.queues_without_worker(NOW, limit=5, tenants=["acme"])
    assert mine == {"count": 1, "rows": [{"queue": "mail", "due": 1, "oldest_due_at": NOW}]}


def test_the_insights_count_the_open_runs_once_for_both_figures():
    current = dw.Later.definition_digest()
    make_run(LATER, created=at(1), digest=current)
    make_run(LATER, created=at(2), digest="0" * 64)
    make_run(LATER, status="paused", created=at(30), digest="0" * 64)  # before the window: not in "workflows"
    statements: list[str] = []

    def capture(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        figures = insights.compute(window())
    scans = [sql for sql in statements if "FROM pgflow_run r WHERE status IN ('running', 'paused')" in sql]
    scans = [sql for sql in scans if "GROUP BY" in sql]  # counted, not the changed runs' rows
    assert len(scans) == 1, scans
    (later,) = [row for row in figures["workflows"] if row["workflow_class"] == LATER]
    assert (later["running"], later["paused"]) == (2, 0)
    assert figures["stuck"]["definition_changed"]["count"] == 2
    assert figures["stuck"]["definition_changed"] == insights.definition_changed(limit=insights.STUCK_LIMIT)
    assert insights.workflows(window()) == figures["workflows"]


def test_runs_whose_definition_changed():
    current = dw.Later.definition_digest()
    make_run(LATER, created=at(1), digest=current)
    old = make_run(LATER, created=at(2), digest="0" * 64)
    make_run(LATER, status="paused", created=at(3), digest="0" * 64)
    make_run(LATER, status="finished", created=at(3), finished=at(2), digest="0" * 64)  # ended: not stuck
    gone = make_run("tests.dashboard_workflows.NoLongerHere", created=at(4), digest=current)

    changed = insights.definition_changed(limit=50)
    assert changed["count"] == 3
    assert {(c["workflow_class"], c["count"]) for c in changed["classes"]} == {
        (LATER, 2),
        ("tests.dashboard_workflows.NoLongerHere", 1),
    }
    rows = {row["run_id"]: row for row in changed["rows"]}
    assert set(rows) == {old.pk, old.pk + 1, gone.pk}
    assert rows[old.pk]["current_digest"] == current and rows[old.pk]["problem"] is None
    assert rows[gone.pk]["current_digest"] is None
    assert "does not import" in rows[gone.pk]["problem"]


# --- windows ---------------------------------------------------------------------------------------


def test_a_window_capped_by_retention_counts_only_what_is_kept():
    make_run(created=at(24 * 1.5))  # 36 h ago: inside 2 days
    make_run(created=at(24 * 3))  # 3 days ago: purged territory
    capped = window("7d", retention=timedelta(days=2))
    assert capped.capped and capped.seconds == 2 * 86_400 and capped.bucket_seconds == 21_600
    figures = insights.compute(capped)
    assert figures["window"]["capped"] is True
    assert figures["window"]["since"] == NOW - timedelta(days=2)
    assert sum(b["started"] for b in figures["runs_per_bucket"]) == 1
    assert all(b["start"].hour % 6 == 0 for b in figures["runs_per_bucket"])


def test_the_30_day_window_buckets_by_day():
    make_run(created=at(24 * 20))
    make_run(created=at(24 * 20, minutes=-5))
    make_run(created=at(24 * 29))
    thirty = window("30d")
    buckets = insights.runs_per_bucket(thirty)
    assert len(buckets) == 31
    assert all(b["start"].hour == 0 for b in buckets)
    assert by_start(buckets)[datetime(2029, 12, 26, tzinfo=UTC)]["started"] == 2
    assert sum(b["started"] for b in buckets) == 3


def test_compute_has_every_figure_and_an_empty_database_gives_zeros():
    figures = insights.compute(window("1h"))
    assert set(figures) == {
        "window",
        "runs_per_bucket",
        "step_failures_per_bucket",
        "phase_p95_per_bucket",
        "workflows",
        "steps",
        "errors",
        "percentiles",
        "stuck",
        "approvals",
        "schedules",
    }
    assert figures["percentiles"]["max_relative_error"] == pytest.approx(histogram.MAX_RELATIVE_ERROR, abs=1e-4)
    assert len(figures["runs_per_bucket"]) == 13  # 5-minute buckets over an hour, the first partial
    assert figures["workflows"] == [] and figures["steps"] == [] and figures["errors"] == []
    assert figures["schedules"] == []
    assert len(figures["phase_p95_per_bucket"]) == 13
    assert all(bucket[phase] is None for bucket in figures["phase_p95_per_bucket"] for phase in rollup.PHASES)
    assert all(group["count"] == 0 for group in figures["stuck"].values())


def test_workflow_classes_lists_each_class_once_sorted():
    for path in (B, A, B, LATER, A):
        make_run(path, created=at(1))
    assert insights.workflow_classes() == sorted({A, B, LATER})
