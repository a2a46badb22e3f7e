#!/usr/bin/env python
"""The run list's search (pgflow.search) at 100,000 runs: each qualifier's time and plan, and
what the search's indexes cost every start and step.

    .venv/bin/python benchmarks/search_runs.py [--runs 100000] [--repeat 5] [--reseed] [--plans]
    .venv/bin/python benchmarks/search_runs.py --wal [--wal-runs 1000] [--rounds 3] [--breakdown]

Seeds (once; ``--reseed`` to redo) RUNS runs over 30 days into its own database
(pgflow_bench_search) with INSERT … SELECT generate_series (setseed: the same rows each
time): inputs with a customer, an amount and items; attributes (customer, plan, region); an
idempotency key on 80 % of them; four steps each (reserve, charge, ship, notify) with outputs,
5 % of attempts failed with an error class and message; 90 % finished, 4 % cancelled, 4 %
running, 2 % paused; 2 % child runs. Then it times the run list
(``/admin/pgflow/workflowrun/?q=…`` through Django's test client: the whole server side,
count and first page) for each qualifier, REPEAT times after a warm-up, and prints the key
lines of EXPLAIN (ANALYZE, BUFFERS) of every query of 1 ms or more (``--plans``: whole plans).

``--wal``: on a private cluster (benchmarks/.work/pg-search-wal: nothing else writes to its
WAL), WAL-RUNS runs of benchmarks.workflows.ReadsOnly with a realistic input, attributes and
key are started, then drained by one ``pgflow_worker --burst``; pg_current_wal_lsn() before
and after gives the WAL bytes per start and per step, with migration 0016's indexes and
without them (dropped), alternating, ROUNDS times each, a CHECKPOINT before each phase (so
each round pays the same full-page images); ``--breakdown`` adds each index alone,
``--fillfactor N`` sets pgflow_run's (100 by default, as the migrations leave it).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DEBUG", "false")  # no per-query bookkeeping while timing
BENCH_DB = "pgflow_bench_search"
WAL_DB = "pgflow_bench_search_wal"
WAL_CLUSTER = ROOT / "benchmarks" / ".work" / "pg-search-wal"
TARGET_MS = 300
SLOW_QUERY_MS = 1.0

from benchmarks.dashboard import DATED_RUNS  # noqa: E402 - after the path is set

CLASSES = [
    "tests.workflows.ThreeSteps",
    "tests.workflows.SlowSteps",
    "tests.workflows.FlowVerbs",
    "tests.workflows.Delayed",
    "tests.workflows.Retrying",
]
STEPS = ["reserve", "charge", "ship", "notify"]
ERRORS = [
    ("TimeoutError", "read timed out after 30s calling the vendor api"),
    ("ConnectionError", "connection refused by the inventory service"),
    ("shop.errors.PaymentDeclined", "card declined for customer"),
    ("ValueError", "bad input: unknown sku"),
]

# The runs over the days with their statuses: the dashboard seed's (one draw for both histories).
SEED_RUNS = f"""
SELECT setseed(0.41);
INSERT INTO pgflow_run (workflow_class, status, current_step, input, key, definition_digest, created_at,
                        updated_at, finished_at, paused_reason, attributes)
SELECT (%(classes)s::text[])[1 + i %% 5], status,
       CASE WHEN status <> 'finished' THEN (%(steps)s::text[])[1 + i %% 4] END,
       jsonb_build_object(
           'customer', jsonb_build_object('id', i %% 20000, 'email', 'c' || (i %% 20000) || '@example.com'),
           'amount', round((random() * 500)::numeric, 2),
           'items', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (i %% 500), 'qty', 1 + i %% 3)),
           'order', i),
       CASE WHEN i %% 5 <> 0 THEN 'order-' || i END,
       (%(digests)s::text[])[1 + i %% 5],
       created, coalesce(ended, created), ended,
       CASE WHEN status = 'paused' THEN 'step failed: TimeoutError' ELSE '' END,
       jsonb_build_object('customer', 'c' || (i %% 20000), 'plan', (ARRAY['gold', 'silver', 'bronze'])[1 + i %% 3],
                          'region', (ARRAY['eu', 'us'])[1 + i %% 2])
FROM ({DATED_RUNS}) AS runs
ORDER BY created;
UPDATE pgflow_run SET parent_id = id - 1 WHERE id %% 50 = 0;
"""

# A run's attempts up to its current step (all four for a finished run): the current one of a
# running run is open, of a paused run failed, of a cancelled run cancelled; 5 %% of the other
# steps failed once before the attempt that completed.
SEED_STEPS = """
SELECT setseed(0.42);
INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, scheduled_at,
                         started_at, finished_at, worker, output, error_class, error_message)
SELECT run_id, (%(steps)s::text[])[n], attempt, status,
       CASE status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN
           CASE WHEN attempt = 1 AND NOT last THEN 'reattempted' ELSE 'paused' END ELSE '' END,
       'workflows', 0, at, at,
       CASE WHEN status <> 'scheduled' THEN at + interval '1 second' END,
       CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN at + interval '2 seconds' END,
       'bench-worker',
       CASE WHEN status = 'completed' THEN
           CASE n WHEN 1 THEN jsonb_build_object('reserved', true, 'warehouse', 'w' || (run_id %% 7))
                  WHEN 2 THEN jsonb_build_object('paid', round((random() * 500)::numeric, 2), 'currency', 'EUR',
                                                 'charge_id', 'ch_' || run_id)
                  WHEN 3 THEN jsonb_build_object('tracking', 'TRK' || run_id) END END,
       CASE WHEN status = 'failed' THEN (%(error_classes)s::text[])[1 + (run_id + n) %% 4] END,
       CASE WHEN status = 'failed' THEN (%(error_messages)s::text[])[1 + (run_id + n) %% 4] || ' ' || run_id END
FROM (
    SELECT r.id AS run_id, n, a.attempt, r.created_at + (n * 3 + a.attempt) * interval '1 second' AS at,
           n = coalesce(array_position(%(steps)s::text[], r.current_step::text), 4) AS last,
           CASE
               WHEN a.attempt = 1 AND a.retried THEN 'failed'
               WHEN n < coalesce(array_position(%(steps)s::text[], r.current_step::text), 5) THEN 'completed'
               WHEN r.status = 'running' THEN (ARRAY['scheduled', 'in_progress'])[1 + r.id %% 2]
               WHEN r.status = 'paused' THEN 'failed'
               WHEN r.status = 'cancelled' THEN 'cancelled'
               ELSE 'completed'
           END AS status
    FROM pgflow_run r
    CROSS JOIN generate_series(1, 4) AS n
    CROSS JOIN LATERAL (
        SELECT attempt, retried FROM (SELECT random() + 0 * n * r.id < 0.05 AS retried) AS draw,  -- per row
        LATERAL (VALUES (1), (2)) AS v(attempt) WHERE attempt = 1 OR retried
    ) AS a
    WHERE n <= coalesce(array_position(%(steps)s::text[], r.current_step::text), 4)
) AS attempt
ORDER BY at;
"""


def setup_django(database: str = BENCH_DB) -> None:
    from benchmarks import engine

    engine.setup_django(database)


def seed(runs: int, days: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from pgflow.registry import resolve

    now = timezone.now()
    digests = [resolve(path).definition_digest() for path in CLASSES]
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pgflow_event, pgflow_signal, pgflow_batch_member, pgflow_batch, pgflow_step, "
            "pgflow_run RESTART IDENTITY CASCADE"
        )
        started = time.monotonic()
        cursor.execute(
            SEED_RUNS, {"classes": CLASSES, "digests": digests, "steps": STEPS, "now": now, "days": days, "runs": runs}
        )
        print(f"  {runs} runs in {time.monotonic() - started:.1f}s", flush=True)
        started = time.monotonic()
        cursor.execute(
            SEED_STEPS,
            {
                "steps": STEPS,
                "error_classes": [name for name, _ in ERRORS],
                "error_messages": [message for _, message in ERRORS],
            },
        )
        cursor.execute("SELECT count(*) FROM pgflow_step")
        print(f"  {cursor.fetchone()[0]} step rows in {time.monotonic() - started:.1f}s", flush=True)
        cursor.execute("VACUUM ANALYZE pgflow_run")
        cursor.execute("VACUUM ANALYZE pgflow_step")


def searches() -> list[tuple[str, str]]:
    """(qualifier, query) pairs: each qualifier alone, with a value that a few runs match
    (the slow case for a first page: no early stop) and one that many match (the slow case
    for the count)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT min(parent_id) FROM pgflow_run WHERE parent_id IS NOT NULL")
        parent = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT date_trunc('hour', max(finished_at)) FROM pgflow_step WHERE status = 'failed'",
        )
        hour = cursor.fetchone()[0]
    bucket = f"{hour:%Y-%m-%dT%H:%M:%SZ}..{(hour.replace(minute=59, second=59)):%Y-%m-%dT%H:%M:%SZ}"
    return [
        ("attr. (few)", "attr.customer:c4242"),
        ("attr. (many)", "attr.plan:gold"),
        ("attr. comparison", "attr.plan:>1"),
        ("input. (few)", "input.customer.id:4242"),
        ("input. (many)", "input.items.0.qty:2"),
        ("input. comparison", "input.amount:>499"),
        ("output. (few)", "output.charge.charge_id:ch_4242"),
        ("output. (many)", "output.reserve.warehouse:w3"),
        ("output. comparison", "output.charge.paid:>499"),
        ("error: class", "error:Timeout"),
        ("error: message", 'error:"customer 4242"'),
        ("step:", "step:charge"),
        ("status: (few)", "status:paused"),
        ("status: (many)", "status:finished"),
        ("key: exact", "key:order-4242"),
        ("key: prefix", "key:order-4242*"),
        ("class: name", "class:Delayed"),
        ("class: path", "class:tests.workflows.Delayed"),
        ("since: 1h", "since:1h"),
        ("since: 30d", "since:30d"),
        ("parent:", f"parent:{parent}"),
        ("failed: one hour", f"failed:{bucket}"),
        ("combined", "attr.plan:gold status:paused since:7d"),
    ]


def client() -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    browser = Client()
    browser.force_login(user)
    return browser


def time_search(browser: Any, query: str, repeat: int) -> dict[str, Any]:
    url = f"/admin/pgflow/workflowrun/?q={quote(query)}"
    response = browser.get(url)  # warm-up
    assert response.status_code == 200, (url, response.status_code)
    text = response.content.decode()
    assert "Search not understood" not in text, (query, text[:2000])
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = browser.get(url)
        samples.append((time.perf_counter() - started) * 1000)
    page = response.content.decode()
    shown = re.search(r"(more than )?([\d,]+) workflow runs?\b", page[page.find('class="paginator') :])
    count = "?" if shown is None else f"{shown[2]}+" if shown[1] else shown[2]
    return {"url": url, "min": min(samples), "median": statistics.median(samples), "count": count}


def plans(browser: Any, query: str) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of each query the page sent that took SLOW_QUERY_MS or more."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        browser.get(f"/admin/pgflow/workflowrun/?q={quote(query)}")
    found = []
    for captured_query in captured.captured_queries:
        sql = captured_query["sql"]
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in sql:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            lines = [row[0] for row in cursor.fetchall()]
        ms = sum(
            float(line.split(":")[1].split()[0]) for line in lines if line.startswith(("Planning Time", "Execution"))
        )
        if ms < SLOW_QUERY_MS:
            continue
        key = [line.strip() for line in lines if "Scan" in line or "Index Cond" in line or "Recheck" in line]
        found.append({"sql": " ".join(sql.split())[:100], "ms": ms, "key": key, "plan": lines})
    return sorted(found, key=lambda item: -item["ms"])


def timings(args: argparse.Namespace) -> None:
    setup_django()
    from django.db import connection

    from pgflow.models import Step, WorkflowRun

    if args.reseed or WorkflowRun.objects.count() < args.runs:
        print(f"seeding {BENCH_DB}: {args.runs} runs over {args.days} days", flush=True)
        seed(args.runs, args.days)
    runs, steps = WorkflowRun.objects.count(), Step.objects.count()
    browser = client()
    load_before = os.getloadavg()[0]
    found = [(name, query, time_search(browser, query, args.repeat)) for name, query in searches()]
    load_after = os.getloadavg()[0]
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]
    print(
        f"\n{runs:,} runs, {steps:,} step rows over {args.days} days; PostgreSQL {version.split()[0]}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load {load_before:.1f} before, {load_after:.1f} after; "
        f"the run list through Django's test client, fastest and median of {args.repeat} after a warm-up.\n"
    )
    print("| qualifier | query | runs found | fastest ms | median ms | under 300 ms |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for name, query, result in found:
        ok = "yes" if result["median"] < TARGET_MS else "**no**"
        print(f"| {name} | `{query}` | {result['count']} | {result['min']:.0f} | {result['median']:.0f} | {ok} |")
    print("\nPlans (EXPLAIN (ANALYZE, BUFFERS) of each query of 1 ms or more; the scan lines):")
    for name, query, _ in found:
        print(f"\n- **{name}** `{query}`")
        for item in plans(browser, query):
            print(f"  - {item['ms']:.1f} ms: `{item['sql']}…`")
            for line in item["plan"] if args.plans else item["key"]:
                print(f"    {line}")


# --- WAL per start and per step -------------------------------------------------------------

SEARCH_INDEXES = {
    "pgflow_run_key": "CREATE INDEX pgflow_run_key ON pgflow_run (key varchar_pattern_ops) WHERE key IS NOT NULL",
    "pgflow_step_error": "CREATE INDEX pgflow_step_error ON pgflow_step (run_id) WHERE error_class IS NOT NULL",
    "pgflow_run_input": "CREATE INDEX pgflow_run_input ON pgflow_run USING gin (input jsonb_path_ops)",
    "pgflow_step_output": (
        "CREATE INDEX pgflow_step_output ON pgflow_step USING gin (output jsonb_path_ops) WHERE status = 'completed'"
    ),
}


def wal(args: argparse.Namespace) -> None:
    from example_project import pgcluster

    WAL_CLUSTER.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(WAL_CLUSTER.parent, 0o755)  # noqa: S103 - the postgres user must reach its data folder below it
    os.environ[pgcluster.DURABLE_ENV] = "1"  # full-page writes on: the WAL a deployment writes
    os.environ["DATABASE_URL"] = pgcluster.ensure(WAL_CLUSTER)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    try:
        setup_django(WAL_DB)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ALTER SYSTEM SET autovacuum = off")  # its WAL is nobody's start
            cursor.execute("SELECT pg_reload_conf()")
            # An A/B for pgflow/store: room on the page lets the per-step run UPDATE be HOT
            # (the TRUNCATE of each round makes new pages, which take it).
            cursor.execute(f"ALTER TABLE pgflow_run SET (fillfactor = {int(args.fillfactor)})")
        variants: dict[str, set[str]] = {"with": set(SEARCH_INDEXES), "without": set()}
        if args.breakdown:  # each index alone, beside none
            variants.update({f"only {name}": {name} for name in SEARCH_INDEXES})
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for variant, present in variants.items():
                rows[variant].append(wal_round(args.wal_runs, indexes=present))
                print(f"  {variant}: {rows[variant][-1][0]:.0f} B/start, {rows[variant][-1][1]:.0f} B/step", flush=True)
        with connection.cursor() as cursor:
            set_indexes(cursor, set(SEARCH_INDEXES))
        print("\n| indexes of migration 0016 | WAL bytes per start (median) | per step (median) | rounds |")
        print("| --- | ---: | ---: | --- |")
        for variant, measured in rows.items():
            starts = statistics.median(row[0] for row in measured)
            per_step = statistics.median(row[1] for row in measured)
            shown = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in measured)
            print(f"| {variant} | {starts:.0f} | {per_step:.0f} | {shown} |")
    finally:
        pgcluster.stop(WAL_CLUSTER)


def set_indexes(cursor: Any, present: set[str]) -> None:
    for name, sql in SEARCH_INDEXES.items():
        cursor.execute(f"DROP INDEX IF EXISTS {name}")
        if name in present:
            cursor.execute(sql)


def wal_round(runs: int, *, indexes: set[str]) -> tuple[float, float]:
    """(WAL bytes per start, per step) of RUNS runs started then drained."""
    from django.db import connection, transaction

    from benchmarks import engine
    from benchmarks.workflows import ReadsOnly

    engine.reset()
    with connection.cursor() as cursor:
        set_indexes(cursor, indexes)
        cursor.execute("CHECKPOINT")
        cursor.execute("SELECT pg_current_wal_lsn()")
        (before,) = cursor.fetchone()
    with transaction.atomic():
        for i in range(runs):
            ReadsOnly.start(
                input={
                    "customer": {"id": i, "email": f"c{i}@example.com"},
                    "amount": 12.5,
                    "items": [{"sku": f"sku-{i % 500}", "qty": 1}],
                    "order": i,
                },
                key=f"order-{i}",
                attributes={"customer": f"c{i}", "plan": "gold"},
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgflow_run, pgflow_step")
        cursor.execute("CHECKPOINT")
        cursor.execute("SELECT pg_current_wal_lsn(), pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [before])
        started, start_bytes = cursor.fetchone()
    connection.close()
    argv, env = engine.worker_command(8, "--burst")
    subprocess.run(argv, cwd=ROOT, env={**os.environ, **env, "PGFLOW_TEST_DB_NAME": WAL_DB}, check=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s), count(*) FROM pgflow_step WHERE status = 'completed'",
            [started],
        )
        step_bytes, steps = cursor.fetchone()
    assert steps == 3 * runs, (steps, runs)
    return float(start_bytes) / runs, float(step_bytes) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reseed", action="store_true", help="seed again even when the database holds rows")
    parser.add_argument("--plans", action="store_true", help="print whole plans, not only their scan lines")
    parser.add_argument("--wal", action="store_true", help="measure the WAL per start and per step instead")
    parser.add_argument("--wal-runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--breakdown", action="store_true", help="with --wal: also each index alone")
    parser.add_argument("--fillfactor", type=int, default=100, help="with --wal: pgflow_run's fillfactor")
    args = parser.parse_args()
    if args.wal:
        wal(args)
    else:
        timings(args)


if __name__ == "__main__":
    main()
