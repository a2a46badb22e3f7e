#!/usr/bin/env python
"""Server time of the dashboard's pages on 30 days of history, and the indexes their queries use.

    .venv/bin/python benchmarks/dashboard.py [--runs 100000] [--steps 1000000] [--days 30]
                                             [--attempts 500] [--repeat 7] [--reseed]

Seeds (once; ``--reseed`` to redo) RUNS runs and STEPS step rows spread over DAYS days, plus
one run with ATTEMPTS attempts, into its own database (pgflow_bench_dashboard) on the example
project's cluster or DATABASE_URL's server. Rows are written with INSERT … SELECT
generate_series (setseed makes them the same each time): the engine would take hours to
make this history, and the dashboard only reads it. Then, on every start, it brings the
insights' hourly rollup up to date (``pgflow.rollup.roll`` without the per-sweep bound): a
deployed system's sweep would have rolled each hour as it closed.

Then, through Django's test client (the whole server side: middleware, admin, queries,
templates; no network), it times each page REPEAT times after a warm-up and prints the
median and the slowest, and runs EXPLAIN (ANALYZE) on every query a page sent that took
1 ms or more, listing the scans (index or sequential) each plan used. The output is a
Markdown section; ``--write`` puts it in benchmarks/RESULTS.md in place of the last one,
leaving the file's other sections alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DEBUG", "false")  # no per-query bookkeeping while timing
BENCH_DB = "pgflow_bench_dashboard"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## Dashboard: server time on 30 days of history"
TARGET_MS = 300
SLOW_QUERY_MS = 1.0  # queries faster than this are not EXPLAINed

# What the figures mean; printed under the table, kept here so --write does not lose it.
NOTES = """
What costs what, and what is left:

- The run list is one indexed page of rows (its "current step for" is a per-row subquery
  on an index of `pgflow_step` by run) plus Django's count; facet counts are one pass per
  filter. The run page and timeline.json of a 500-attempt run read that run's rows only.
- The insights read the hourly rollup the sweep keeps (`pgflow/rollup.py`). For the hours
  it has rolled: the chart counts from one row per hour and workflow class (summed by
  bucket in SQL), the per-class and per-step histograms from one row per *day* and group
  for whole days (1,300 rows for 30 days here, merged in Python) and per hour at the edges.
  Only the partial first hour and the hours after the watermark (here the open hour) are
  counted live, by the same function as the rollup, over the indexes `pgflow_step_finished`,
  `pgflow_run_created` and `pgflow_run_finished`; the live running/paused counts use
  `pgflow_run_status_created` or `pgflow_run_created`, as the planner picks. The rollup
  tables' unique indexes lead with (hours, start); at this size the planner reads the
  per-step rows through them and scans the small per-class and failure tables (~2 ms).
  So the cost follows the window, not the history.
- Day rows are there because hour rows are not enough: a month of per-step histograms is
  18,000 hour rows, and reading them costs several times what the day rows cost (both
  timed on this history in the line below the table). Merging the day rows' histograms
  (JSON decoding and adding about 300,000 buckets) is now the 30-day page's largest single
  cost, then the template and the live stuck lists.
- Before the rollup, the per-step table scanned and joined every attempt of the window, and
  the percentiles sorted a sample of them (that engine's timings are in this section as
  written at commit 8206af6: `git show 8206af6:benchmarks/RESULTS.md`). The percentiles are
  now estimates from log-scale histograms, within 9.05 % of `percentile_cont` (the page
  says so); counts are exact.
- Honest caveat on the set-up: the seed writes 30 days at once, so this script rolls them
  in one go before timing (the figure is above); a deployed sweep rolls each hour 5
  minutes after it ends (12 hours holding rows per sweep while catching up), so the timings
  are those of a system whose workers run. With an empty rollup the pages are exact but
  cost what they did before.
- Seeded rows are inserted in time order, as a live table grows: a day's attempts share
  heap pages, which the live parts and the rollup's hours read.
"""

# Real, importable classes, so the "definition changed" check resolves them.
CLASSES = [
    "tests.workflows.ThreeSteps",
    "tests.workflows.SlowSteps",
    "tests.workflows.FlowVerbs",
    "tests.workflows.Delayed",
    "tests.workflows.Retrying",
]
ERRORS = ["ConnectionError", "TimeoutError", "ValueError", "shop.errors.PaymentDeclined"]


def commit() -> str:
    from benchmarks.rollup import commit as measured

    return measured()


def setup_django() -> None:
    from benchmarks import engine

    engine.setup_django(BENCH_DB)


# --- seeding ----------------------------------------------------------------------------------

# The runs of both seeds (benchmarks/search_runs.py's too): RUNS rows of (i, created, status,
# ended), created over the DAYS days before NOW, 90 % finished, 4 % cancelled, 4 % running,
# 2 % paused; a finished or cancelled run ended 5 to 905 seconds after it was created (never
# after NOW). Parameters runs, days and now; its random() draws follow the caller's setseed,
# so a seed gives the same rows each time.
DATED_RUNS = """
    SELECT i, created, status,
           CASE WHEN status IN ('finished', 'cancelled')
                THEN least(created + (5 + random() * 900) * interval '1 second', %(now)s) END AS ended
    FROM (
        SELECT i, %(now)s - random() * %(days)s * interval '1 day' AS created,
               CASE WHEN r < 0.90 THEN 'finished' WHEN r < 0.94 THEN 'cancelled'
                    WHEN r < 0.98 THEN 'running' ELSE 'paused' END AS status
        FROM (SELECT i, random() AS r FROM generate_series(1, %(runs)s) AS i) AS draw
    ) AS dated
"""

SEED_RUNS = f"""
SELECT setseed(0.42);
INSERT INTO pgflow_run (workflow_class, status, current_step, input, definition_digest, created_at, updated_at,
                        finished_at, paused_reason)
SELECT (%(classes)s::text[])[1 + i %% 5],
       status,
       CASE WHEN status IN ('running', 'paused') THEN 'step_' || %(per_run)s / 2 END,
       jsonb_build_object('order', i),
       CASE WHEN status IN ('running', 'paused') AND i %% 50 = 0 THEN repeat('0', 64)
            ELSE (%(digests)s::text[])[1 + i %% 5] END,
       created, coalesce(ended, created), ended,
       CASE WHEN status = 'paused' THEN 'step step_' || %(per_run)s / 2 || ' #2 failed: ValueError: bad input'
            ELSE '' END
FROM ({DATED_RUNS}) AS runs
ORDER BY created  -- a real table grows in time order: rows of one day share pages
"""

# Each run gets PER_RUN attempts spread over its life: pairs of attempts of one step (the
# first fails and is reattempted 5 %% of the time). A running run's last attempt is open
# (scheduled, in progress or waiting on a signal, some past their lease or deadline); a
# paused run's last attempt failed and paused it.
SEED_STEPS = """
SELECT setseed(0.43);
INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, scheduled_at,
                         started_at, finished_at, waiting_since, deadline_at, worker, lease_expires_at,
                         error_class, error_message)
SELECT run_id, 'step_' || ((n + 1) / 2), 2 - n %% 2, status,
       CASE status WHEN 'completed' THEN 'completed' WHEN 'failed' THEN
            CASE WHEN last THEN 'paused' ELSE 'reattempted' END ELSE '' END,
       'workflows', 0, created, scheduled,
       CASE WHEN status = 'scheduled' THEN NULL ELSE scheduled + queued END,
       CASE WHEN status IN ('completed', 'failed') THEN scheduled + queued + ran END,
       CASE WHEN status = 'waiting' THEN scheduled + queued + ran END,
       CASE WHEN status = 'waiting' THEN scheduled + queued + ran + interval '1 day' END,
       CASE WHEN status IN ('in_progress', 'completed', 'failed') THEN 'bench-worker' ELSE '' END,
       CASE WHEN status = 'in_progress' THEN scheduled + queued + ran + interval '60 seconds' END,
       CASE WHEN status = 'failed' THEN (%(errors)s::text[])[1 + (run_id + n) %% 4] END,
       CASE WHEN status = 'failed' THEN 'it went wrong in step ' || n END
FROM (
    SELECT r.id AS run_id, n, n = %(per_run)s AS last,
           r.created_at + (n - 1) * (coalesce(r.finished_at, %(now)s) - r.created_at) / %(per_run)s AS created,
           r.created_at + (n - 1) * (coalesce(r.finished_at, %(now)s) - r.created_at) / %(per_run)s
               + (random() * 30) * interval '1 second' AS scheduled,
           random() * interval '2 seconds' AS queued,
           random() * random() * interval '20 seconds' AS ran,
           CASE
               WHEN r.status = 'running' AND n = %(per_run)s THEN
                   (ARRAY['scheduled', 'in_progress', 'waiting'])[1 + r.id %% 3]
               WHEN r.status = 'running' AND n > %(per_run)s THEN NULL
               WHEN r.status = 'paused' AND n = %(per_run)s THEN 'failed'
               WHEN r.status = 'cancelled' AND n = %(per_run)s THEN 'cancelled'
               WHEN n %% 2 = 1 AND random() < 0.05 THEN 'failed'
               ELSE 'completed'
           END AS status
    FROM pgflow_run r CROSS JOIN generate_series(1, %(per_run)s) AS n
) AS attempt
ORDER BY created
"""

SEED_EVENTS = """
INSERT INTO pgflow_event (run_id, event, actor, details, created_at)
SELECT id, 'started', 'system', '{}'::jsonb, created_at FROM pgflow_run;
INSERT INTO pgflow_event (run_id, event, actor, details, created_at)
SELECT id, status, 'system', '{}'::jsonb, finished_at FROM pgflow_run WHERE status IN ('finished', 'cancelled');
INSERT INTO pgflow_event (run_id, event, actor, details, created_at)
SELECT id, 'paused', 'system', jsonb_build_object('reason', paused_reason), updated_at
FROM pgflow_run WHERE status = 'paused';
"""


def seed(runs: int, steps: int, days: int, attempts: int) -> int:
    """Fill the database; returns the id of the run with ``attempts`` attempts."""
    from django.db import connection
    from django.utils import timezone

    from pgflow.registry import resolve

    now = timezone.now()
    digests = [resolve(path).definition_digest() for path in CLASSES]
    per_run = max(steps // runs, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE pgflow_event, pgflow_signal, pgflow_batch_member, pgflow_batch, pgflow_step, "
            "pgflow_run, pgflow_rollup_run, pgflow_rollup_step, pgflow_rollup_failure, "
            "pgflow_rollup_state RESTART IDENTITY CASCADE"
        )
        started = time.monotonic()
        cursor.execute(
            SEED_RUNS,
            {"classes": CLASSES, "digests": digests, "per_run": per_run, "now": now, "days": days, "runs": runs},
        )
        print(f"  {runs} runs in {time.monotonic() - started:.1f}s", flush=True)
        started = time.monotonic()
        cursor.execute(SEED_STEPS, {"per_run": per_run, "now": now, "errors": ERRORS})
        print(f"  {runs * per_run} step rows in {time.monotonic() - started:.1f}s", flush=True)
        cursor.execute(SEED_EVENTS)
        long_run = seed_long_run(cursor, now, attempts)
        started = time.monotonic()
        cursor.execute("VACUUM ANALYZE pgflow_run")
        cursor.execute("VACUUM ANALYZE pgflow_step")
        cursor.execute("VACUUM ANALYZE pgflow_event")
        print(f"  vacuum analyze in {time.monotonic() - started:.1f}s", flush=True)
    return long_run


def build_rollup() -> tuple[int, float]:
    """Roll every closed hour not rolled yet, as the sweep would have, one at a time, as each
    closed; returns (hours rolled, seconds taken)."""
    from django.db import connection

    from pgflow import rollup

    started = time.monotonic()
    rolled = rollup.roll(limit=None)
    with connection.cursor() as cursor:
        for table in ("pgflow_rollup_run", "pgflow_rollup_step", "pgflow_rollup_failure"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    return rolled, time.monotonic() - started


def rollup_reads(days: int = 30) -> tuple[float, float]:
    """The fastest of 3 reads of a window's rolled hours, in ms: with day rows, and with
    hour rows only (what the day rows save)."""
    from django.utils import timezone

    from pgflow import rollup

    now = timezone.now()
    first = rollup.ceil_to(now - timedelta(days=days), rollup.HOUR)
    last = rollup.rolled_until() or first
    times = []
    for use_days in (True, False):
        samples = []
        for _ in range(3):
            started = time.perf_counter()
            rollup.read(first, last, 86_400, days=use_days)
            samples.append((time.perf_counter() - started) * 1000)
        times.append(min(samples))
    return times[0], times[1]


def seed_long_run(cursor: Any, now: Any, attempts: int) -> int:
    """A Retrying run that reattempted its step ATTEMPTS - 1 times over a day, still running."""
    cursor.execute(
        "INSERT INTO pgflow_run (workflow_class, status, current_step, input, definition_digest, created_at, "
        "updated_at, key, paused_reason) VALUES ('tests.workflows.Retrying', 'running', 'flaky', '{}', %s, "
        "%s - interval '1 day', %s, 'bench-long-run', '') RETURNING id",
        [resolve_digest("tests.workflows.Retrying"), now, now],
    )
    run_id = cursor.fetchone()[0]
    cursor.execute(
        """
        INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at,
                                 scheduled_at, started_at, finished_at, worker, error_class, error_message,
                                 error_backtrace, error_causes)
        SELECT %(run)s, 'flaky', n, CASE WHEN n = %(attempts)s THEN 'scheduled' ELSE 'failed' END,
               CASE WHEN n = %(attempts)s THEN '' ELSE 'reattempted' END, 'workflows', 0, t, t + interval '60 s',
               CASE WHEN n < %(attempts)s THEN t + interval '61 s' END,
               CASE WHEN n < %(attempts)s THEN t + interval '64 s' END,
               'bench-worker', CASE WHEN n < %(attempts)s THEN 'ConnectionError' END,
               CASE WHEN n < %(attempts)s THEN 'connection refused (attempt ' || n || ')' END,
               CASE WHEN n < %(attempts)s THEN repeat('  File "shop/tasks.py", line 12, in flaky' || chr(10), 20) END,
               CASE WHEN n < %(attempts)s THEN '[{"class": "OSError", "message": "[Errno 111]"}]'::jsonb END
        FROM (SELECT n, %(now)s - interval '1 day' + (n - 1) * interval '170 s' AS t
              FROM generate_series(1, %(attempts)s) AS n) AS a
    """,
        {"run": run_id, "attempts": attempts, "now": now},
    )
    cursor.execute(
        """
        INSERT INTO pgflow_event (run_id, event, actor, details, created_at)
        SELECT %(run)s, CASE WHEN n %% 2 = 0 THEN 'step_failed' ELSE 'reattempted' END, 'bench-worker',
               jsonb_build_object('n', n), %(now)s - interval '1 day' + n * interval '85 s'
        FROM generate_series(1, 2 * %(attempts)s) AS n
    """,
        {"run": run_id, "attempts": attempts, "now": now},
    )
    return run_id


def resolve_digest(path: str) -> str:
    from pgflow.registry import resolve

    return resolve(path).definition_digest()


# --- timing -----------------------------------------------------------------------------------


def client() -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    browser = Client()
    browser.force_login(user)
    return browser


def time_page(browser: Any, url: str, repeat: int) -> dict[str, Any]:
    response = browser.get(url)  # warm-up: template loading, the class registry, the plan cache
    assert response.status_code == 200, (url, response.status_code)
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = browser.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return {
        "url": url,
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
        "bytes": len(response.content),
    }


def plans(browser: Any, url: str) -> list[dict[str, Any]]:
    """EXPLAIN ANALYZE of each query the page sent that took SLOW_QUERY_MS or more."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        browser.get(url)
    found = []
    for query in captured.captured_queries:
        sql = query["sql"]
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in sql:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            # The settings insights.compute() runs its queries with.
            cursor.execute("SET LOCAL jit = off")
            cursor.execute("SET LOCAL work_mem = '64MB'")
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            plan = cursor.fetchone()[0][0]
        ms = plan["Execution Time"] + plan.get("Planning Time", 0)
        if ms < SLOW_QUERY_MS:
            continue
        found.append({"sql": " ".join(sql.split())[:110], "ms": ms, "scans": sorted(set(scans(plan["Plan"])))})
    return sorted(found, key=lambda item: -item["ms"])


def scans(node: dict[str, Any]) -> list[str]:
    kind = node["Node Type"]
    found = []
    if "Index Name" in node:
        found.append(f"{kind.replace(' Scan', '')} {node['Index Name']}")
    elif kind == "Seq Scan":
        found.append(f"Seq Scan {node['Relation Name']}")
    for child in node.get("Plans", []):
        found.extend(scans(child))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--attempts", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reseed", action="store_true", help="seed again even when the database holds rows")
    parser.add_argument("--write", action="store_true", help=f"write the section into {RESULTS.name}")
    args = parser.parse_args()

    setup_django()
    from django.db import connection

    from pgflow.models import Step, WorkflowRun

    long_run = WorkflowRun.objects.filter(key="bench-long-run").values_list("pk", flat=True).first()
    if args.reseed or long_run is None or WorkflowRun.objects.count() < args.runs:
        print(f"seeding {BENCH_DB}: {args.runs} runs, {args.steps} steps over {args.days} days", flush=True)
        long_run = seed(args.runs, args.steps, args.days, args.attempts)
    rolled, rolling = build_rollup()
    print(f"  rollup: {rolled} hours rolled in {rolling:.1f}s", flush=True)
    runs, steps = WorkflowRun.objects.count(), Step.objects.count()
    from pgflow import rollup
    from pgflow.models import StepRollup

    mark = rollup.rolled_until()
    rollup_rows = StepRollup.objects.count()
    browser = client()
    base = "/admin/pgflow/workflowrun/"
    pages = [
        ("insights, 24h", "/admin/pgflow/insights/?window=24h"),
        ("insights, 7d", "/admin/pgflow/insights/?window=7d"),
        ("insights, 30d", "/admin/pgflow/insights/?window=30d"),
        ("insights.json, 30d", "/admin/pgflow/insights.json?window=30d"),
        ("run list", base),
        ("run list, status=paused", f"{base}?status__exact=paused"),
        ("run list, one class", f"{base}?workflow_class=tests.workflows.Delayed"),
        ("run list, search by key", f"{base}?q=bench-long-run"),
        ("run list, with facet counts", f"{base}?_facets=True"),
        (f"run page, {args.attempts} attempts", f"{base}{long_run}/change/"),
        (f"timeline.json, {args.attempts} attempts", f"{base}{long_run}/timeline.json"),
    ]
    load_before = os.getloadavg()[0]
    results = [(name, time_page(browser, url, args.repeat)) for name, url in pages]
    load_after = os.getloadavg()[0]
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        version = cursor.fetchone()[0]

    out: list[str] = []
    line = out.append  # the section is collected, then printed and maybe written
    line(SECTION)
    line("")
    line(
        f"{runs:,} runs and {steps:,} step rows over {args.days} days, one run with {args.attempts} attempts; "
        f"PostgreSQL {version.split()[0]}, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before and {load_after:.1f} after (the machine is "
        f"shared: the fastest of the {args.repeat} requests is the best guess of the unshared cost). Each page "
        f"through the Django test client after a warm-up (`python benchmarks/dashboard.py`, commit {commit()}). "
        f"Target: under {TARGET_MS} ms. The insights' hourly rollup was brought up to date before timing "
        f"(this start rolled {rolled} hours in {rolling:.1f}s; a deployed sweep rolls each hour as it closes): "
        f"every hour before {mark:%H:%M} UTC is rolled, {rollup_rows:,} per-step rollup rows (hour and day "
        f"rows) in all."
    )
    line("")
    line("| page | fastest ms | median ms | slowest ms | response KB | median under target |")
    line("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, result in results:
        ok = "yes" if result["median"] < TARGET_MS else "**no**"
        line(
            f"| {name} | {result['min']:.0f} | {result['median']:.0f} | {result['max']:.0f} | "
            f"{result['bytes'] / 1024:.0f} | {ok} |"
        )
    line("")
    by_day, by_hour = rollup_reads()
    line(
        f"Reading the 30-day window's rolled hours alone (`rollup.read`, fastest of 3): {by_day:.0f} ms with "
        f"the day rows, {by_hour:.0f} ms from hour rows only."
    )
    line("")
    line(NOTES.strip())
    line("")
    line("Query plans (EXPLAIN ANALYZE of each query of 1 ms or more, run after the timings; the scans used):")
    for name, url in pages:
        found = plans(browser, url)
        line("")
        line(f"- **{name}**" + ("" if found else ": every query under 1 ms"))
        for item in found:
            line(f"  - {item['ms']:.1f} ms: `{item['sql']}…` — {', '.join(item['scans']) or 'no table scan'}")
    text = "\n".join(out) + "\n"
    sys.stdout.write("\n" + text)
    if args.write:
        write_section(RESULTS, text)
        sys.stdout.write(f"written to {RESULTS.relative_to(ROOT)}\n")


def write_section(path: Path, section: str) -> None:
    """Put ``section`` in place of this benchmark's section of RESULTS.md (or at its end),
    leaving the other sections as they are. The file is read right before it is written."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        rest = "".join(lines[end:])
        text = "".join(lines[:start]) + section + ("\n" + rest if rest else "")
    path.write_text(text)


if __name__ == "__main__":
    main()
