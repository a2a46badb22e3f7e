#!/usr/bin/env python
"""Issue #38: retention by partition against retention row by row, and the filing it needs.

    .venv/bin/python benchmarks/retention.py [--runs 200000] [--open 1000]

On a durable cluster of its own (benchmarks/.work/pg-durable-retention: fsync,
synchronous_commit and full_page_writes on; stopped at the end), database ``pgflow_retention``.
One run of ThreeNoops is worked by a real ``pgflow_worker --burst``: its run row, 3 attempts and
5 events, as the engine writes them, are the template. Each layout then starts from empty
tables: RUNS copies of it finished 31-35 days ago (every time column moved by the same amount,
written with ``generate_series``, foreign-key triggers off while seeding), and OPEN running runs
(their last attempt scheduled) and OPEN paused runs created 40 days ago, which must survive;
vacuumed and analysed. Then:

- ``filed``: the seeded days' partitions made, then ``history.file_ended(at=now)`` called
  until it files nothing (the sweep's filing, 1,000 runs a transaction): runs filed per
  second, and the dead rows the move leaves in the live partitions; VACUUM ANALYZE
  (autovacuum's work in the 30 days between); then
  ``sweep.purge(at=now)`` called until a call deletes nothing and no expired day is left.
- ``unfiled``: the same purge with every row left in the live partitions (the row-by-row path,
  as before partitioning).

- ``--sustain RATE --seconds N``: instead of the layouts, a feeder on a connection of its own
  writes RATE runs a second that end as they are written (in fifths of a second, into the
  live partitions by name, as the engine writes) for N seconds, with ``RETENTION`` at
  ``SUSTAIN_RETENTION`` (2 minutes), while the real ``sweep.run()`` runs every
  ``SWEEP_INTERVAL``, as a worker's sweep thread would: each sweep's runs filed and purged,
  its seconds, the expired runs left and the tables' sizes; the rate the feeder reached; and
  the live partitions' dead and live rows before and after. The runs end today, so their
  day's partitions stay (a day goes a day after its last run's cutoff), as in production.

For each layout: runs deleted / seconds spent in purge, purge calls, day partitions dropped, then
n_dead_tup (pg_stat_user_tables, read from a new connection) and total sizes of pgflow_run,
pgflow_step_live, pgflow_event_live and the day partitions, and a check that the open and
paused runs kept every row. Prints tables for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
os.environ.setdefault("DEBUG", "false")

from example_project import pgcluster  # noqa: E402 - after the path is set

CLUSTER = ROOT / "benchmarks" / ".work" / "pg-durable-retention"
DATABASE = "pgflow_retention"
TABLES = ("pgflow_run", "pgflow_step_live", "pgflow_event_live")
RETENTION = timedelta(days=30)  # PGFLOW["RETENTION"]'s default, which the purge applies
SUSTAIN_RETENTION = timedelta(minutes=2)  # --sustain's: runs ended now expire within the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200_000, help="finished runs, expired")
    parser.add_argument("--open", type=int, default=1000, help="running runs, and as many paused, that stay")
    parser.add_argument("--layouts", default="filed,unfiled")
    parser.add_argument("--sustain", type=int, default=0, help="ended runs a second, fed while the sweep runs")
    parser.add_argument("--seconds", type=int, default=120, help="how long --sustain feeds")
    parser.add_argument(
        "--autovacuum",
        choices=("tables", "server"),
        default="tables",
        help="the tables' own autovacuum settings (migration 0023), or the server's for them (RESET)",
    )
    args = parser.parse_args()
    with pgcluster.durable(CLUSTER):
        run(args)


def run(args: argparse.Namespace) -> None:
    # After DATABASE_URL names the durable cluster: the example project's settings read it.
    from benchmarks import engine

    engine.setup_django(DATABASE)
    engine.print_settings("shared_buffers", "autovacuum")
    template()
    if args.sustain:
        sustain(args.sustain, args.seconds, args.open, args.autovacuum)
        return
    results = []
    for layout in args.layouts.split(","):
        results.append(measure(layout, args.runs, args.open))
    print()
    print(
        "| layout | runs deleted | purge s | runs/s | purge calls | days dropped | filed runs/s "
        "| filing s | left: expired runs | load before → after |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        filing = f"{r['filed'] / r['filing_s']:,.0f} | {r['filing_s']:.1f}" if r["filing_s"] else "– | –"
        print(
            f"| {r['layout']} | {r['deleted']:,} | {r['purge_s']:.1f} | {r['deleted'] / r['purge_s']:,.0f} "
            f"| {r['calls']} | {r['dropped']} | {filing} | {r['left']} | {r['load_before']} → {r['load_after']} |"
        )
    print()
    print("| layout | when | " + " | ".join(f"{t} dead / live rows, MB" for t in TABLES) + " | day partitions MB |")
    print("| --- | --- |" + " ---: |" * (len(TABLES) + 1))
    for r in results:
        for when, stats in r["stats"]:
            cells = " | ".join(f"{d:,} / {n:,}, {mb:.0f}" for d, n, mb in (stats[t] for t in TABLES))
            print(f"| {r['layout']} | {when} | {cells} | {stats['days']:.0f} |")
    print()
    for r in results:
        print(f"{r['layout']}: open and paused runs kept: {r['kept']}; autovacuum runs meanwhile: {r['autovacuums']}")


def template() -> None:
    """One ThreeNoops run worked by a real worker, kept in bench_template_* tables."""
    from django.db import connection

    from benchmarks import engine

    engine.reset()
    engine.enqueue(1)
    argv, env = engine.worker_command(2, "--burst")
    subprocess.run(argv, cwd=ROOT, env={**os.environ, **env, "PGFLOW_TEST_DB_NAME": DATABASE}, check=True)
    with connection.cursor() as cursor:
        for table in ("run", "step", "event"):
            cursor.execute(f"DROP TABLE IF EXISTS bench_template_{table}")
        cursor.execute("CREATE TABLE bench_template_run AS SELECT * FROM pgflow_run WHERE status = 'finished'")
        cursor.execute("CREATE TABLE bench_template_step AS SELECT * FROM pgflow_step")
        cursor.execute("CREATE TABLE bench_template_event AS SELECT * FROM pgflow_event")
        cursor.execute(
            "SELECT (SELECT count(*) FROM bench_template_run), (SELECT count(*) FROM bench_template_step), "
            "(SELECT count(*) FROM bench_template_event)"
        )
        counts = cursor.fetchone()
    print("template: runs, attempts, events =", counts, flush=True)
    assert counts[0] == 1 and counts[1] == 3, counts


def columns(table: str) -> list[tuple[str, str]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
            "AND column_name <> 'id' ORDER BY ordinal_position",
            [table],
        )
        return cursor.fetchall()


def copies(table: str, alias: str, overrides: dict[str, str]) -> tuple[str, str]:
    """The column list and the SELECT list of copies of ``alias``'s rows: each time column
    moved by ``shift``, ``overrides`` as given."""
    names, values = [], []
    for name, kind in columns(table):
        names.append(name)
        if name in overrides:
            values.append(overrides[name])
        elif kind == "timestamp with time zone":
            values.append(f"{alias}.{name} + g.shift")
        else:
            values.append(f"{alias}.{name}")
    return ", ".join(names), ", ".join(values)


def seed_sql(kind: str) -> str:
    """RUNS copies of the template, as ``kind``: finished 31-35 days ago, ``ending`` (finished
    as the statement runs), or running or paused, created 40 days ago."""
    if kind == "finished":
        shift = "now() - interval '31 days' - n * interval '4 days' / %(runs)s - t.finished_at"
        run_over, step_over = {"key": "NULL"}, {}
    elif kind == "ending":
        shift = "now() - t.finished_at"
        run_over, step_over = {"key": "NULL"}, {}
    else:
        shift = "now() - interval '40 days' - t.created_at"
        run_over = {"key": "NULL", "status": f"'{kind}'", "finished_at": "NULL", "current_step": "'three'"}
        if kind == "paused":
            run_over["paused_reason"] = "'benchmark'"
        last = "s.step_name = 'three'"
        step_over = {  # the last attempt still scheduled, far ahead (no worker runs meanwhile)
            "status": f"CASE WHEN {last} THEN 'scheduled' ELSE s.status END",
            "outcome": f"CASE WHEN {last} THEN '' ELSE s.outcome END",
            "scheduled_at": f"CASE WHEN {last} THEN now() + interval '1 year' ELSE s.scheduled_at + g.shift END",
            **{
                name: f"CASE WHEN {last} THEN NULL ELSE s.{name} + g.shift END"
                for name in ("started_at", "finished_at", "lease_expires_at")
            },
            "output": f"CASE WHEN {last} THEN NULL ELSE s.output END",
            "claim_token": f"CASE WHEN {last} THEN NULL ELSE s.claim_token END",
        }
    run_names, run_values = copies("pgflow_run", "t", run_over)
    step_names, step_values = copies("pgflow_step", "s", {**step_over, "run_id": "g.id", "history_day": "NULL"})
    event_names, event_values = copies(
        "pgflow_event", "e", {"run_id": "g.id", "step_id": "ns.id", "history_day": "NULL"}
    )
    return f"""
        WITH shifts AS (
            SELECT n, {shift} AS shift FROM bench_template_run AS t, generate_series(1, %(runs)s) AS n
        ), runs AS (
            INSERT INTO pgflow_run ({run_names})
            SELECT {run_values} FROM bench_template_run AS t, shifts AS g ORDER BY g.n
            RETURNING id, updated_at - (SELECT updated_at FROM bench_template_run) AS shift
        ), steps AS (
            INSERT INTO pgflow_step ({step_names})
            SELECT {step_values} FROM runs AS g, bench_template_step AS s ORDER BY g.id, s.id
            RETURNING id, run_id, step_name, attempt
        )
        INSERT INTO pgflow_event ({event_names})
        SELECT {event_values} FROM runs AS g CROSS JOIN bench_template_event AS e
            LEFT JOIN bench_template_step AS ts ON ts.id = e.step_id
            LEFT JOIN steps AS ns ON ns.run_id = g.id AND ns.step_name = ts.step_name AND ns.attempt = ts.attempt
        ORDER BY g.id, e.id
    """


def seed(runs: int, open_runs: int) -> None:
    from django.db import connection

    from benchmarks import engine
    from pgflow.store import history

    engine.reset()
    with connection.cursor() as cursor:
        for day in history.days():
            for table in history.TABLES:
                cursor.execute(f"DROP TABLE {history.partition(table, day)}")
        cursor.execute("DELETE FROM pgflow_history_state")
        cursor.execute("SET session_replication_role = replica")  # no FK trigger per seeded row
        cursor.execute("SET enable_nestloop = off")  # the events' join to the new attempts: hashed
        began = time.monotonic()
        cursor.execute(seed_sql("finished"), {"runs": runs})
        for kind in ("running", "paused"):
            cursor.execute(seed_sql(kind), {"runs": open_runs})
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("SET enable_nestloop = on")
        print(f"seeded {runs:,} finished and {2 * open_runs:,} open runs in {time.monotonic() - began:.1f} s")
    vacuum()


def made_days() -> None:
    """Make the partitions of the seeded runs' days before the filing is timed. An attach gives
    way to whatever holds the live partition's lock for longer than ``history.LOCK_TIMEOUT``,
    an autovacuum of it included (the filing's first batches leave hundreds of thousands of
    dead rows, which start one), and the sweep files the rest of that day at a later sweep;
    this loop would stop there, and count the rest as purged unfiled."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT timezone('UTC', finished_at)::date FROM pgflow_run WHERE finished_at IS NOT NULL"
        )
        made_days_of([row[0] for row in cursor.fetchall()])


def made_days_of(days: list[date]) -> None:
    """Make ``days``' partitions, waiting out any lock that makes an attach give way."""
    from pgflow.store import history

    history.make_days(set(days) - set(history.days()), wait=600)
    if missing := set(days) - set(history.days()):
        raise SystemExit(f"the partitions of {sorted(missing)} could not be made in 10 minutes")


def vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        for table in ("pgflow_run", "pgflow_step", "pgflow_event"):
            cursor.execute(f"VACUUM ANALYZE {table}")


def open_rows() -> tuple[int, int, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), (SELECT count(*) FROM pgflow_step WHERE run_id = ANY(array_agg(r.id))), "
            "(SELECT count(*) FROM pgflow_event WHERE run_id = ANY(array_agg(r.id))) "
            "FROM pgflow_run AS r WHERE r.status IN ('running', 'paused')"
        )
        return tuple(cursor.fetchone())


def stats() -> dict:
    """n_dead_tup, n_live_tup and total MB of TABLES, and the day partitions' MB, read from a
    new connection (a backend's counters reach pg_stat_user_tables when it flushes them)."""
    from django.db import connection

    connection.close()
    time.sleep(1.5)
    found: dict = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                "SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                "WHERE relname = %s",
                [table],
            )
            dead, live, size = cursor.fetchone()
            found[table] = (dead, live, size / 2**20)
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
            "WHERE c.relkind = 'r' AND (c.relname LIKE 'pgflow_step_2%%' OR c.relname LIKE 'pgflow_event_2%%')"
        )
        found["days"] = int(cursor.fetchone()[0]) / 2**20
    return found


def table_autovacuum(*, reset: bool) -> None:
    """RESET TABLES' own autovacuum settings if ``reset``, else set migration 0023's (an earlier
    run may have RESET them in this database); print what each table has."""
    import importlib

    from django.db import connection

    migration = importlib.import_module("pgflow.migrations.0023_live_autovacuum")
    with connection.cursor() as cursor:
        for table in TABLES:
            if reset:
                cursor.execute(f"ALTER TABLE {table} RESET ({', '.join(migration.SETTINGS)})")
            else:
                cursor.execute(
                    f"ALTER TABLE {table} SET ({', '.join(f'{k} = {v}' for k, v in migration.SETTINGS.items())})"
                )
            cursor.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = %s::regclass", [table])
            own = [option for option in cursor.fetchone()[0] if option.startswith("autovacuum")]
            print(f"{table}: autovacuum {', '.join(own) if own else 'as the server sets'}", flush=True)


def autovacuums() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(autovacuum_count), 0) FROM pg_stat_user_tables "
            "WHERE relname LIKE 'pgflow_run' OR relname LIKE 'pgflow_step%%' OR relname LIKE 'pgflow_event%%'"
        )
        return int(cursor.fetchone()[0])


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def measure(layout: str, runs: int, open_runs: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    from pgflow.runtime import sweep
    from pgflow.store import history

    seed(runs, open_runs)
    kept_before = open_rows()
    result: dict = {"layout": layout, "stats": [("seeded", stats())], "filed": 0, "filing_s": 0.0}
    vacuums = autovacuums()
    result["load_before"] = load()
    if layout == "filed":
        made_days()
        began = time.monotonic()
        while filed := history.file_ended(at=timezone.now()):
            result["filed"] += filed
        result["filing_s"] = time.monotonic() - began
        print(f"filed {result['filed']:,} runs in {result['filing_s']:.1f} s", flush=True)
        result["stats"].append(("filed", stats()))
        vacuum()
        result["stats"].append(("filed, vacuumed", stats()))
    days_before = len(history.days())
    deleted, spent, calls = 0, 0.0, 0
    while True:
        began = time.monotonic()
        gone = sweep.purge(at=timezone.now())
        spent += time.monotonic() - began
        calls += 1
        deleted += gone
        cutoff = timezone.now() - RETENTION
        expired = [day for day in history.days() if day_end(day) <= cutoff]
        if not gone and not expired:
            break
        if not gone and calls > 1000:
            raise SystemExit(f"purge stopped with {len(expired)} expired days left")
    result["load_after"] = load()
    result.update(deleted=deleted, purge_s=spent, calls=calls, dropped=days_before - len(history.days()))
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pgflow_run WHERE status IN ('finished', 'cancelled')")
        result["left"] = cursor.fetchone()[0]
    result["stats"].append(("purged", stats()))
    result["autovacuums"] = autovacuums() - vacuums
    kept = open_rows()
    result["kept"] = f"{kept} (before {kept_before})" if kept != kept_before else f"all {kept}"
    print(
        f"{layout}: {deleted:,} runs purged in {spent:.1f} s ({deleted / spent:,.0f}/s), {calls} calls",
        flush=True,
    )
    return result


def sustain(rate: int, seconds: int, open_runs: int, autovacuum: str) -> None:
    """RATE ended runs a second for SECONDS, written beside the real sweep (see the module's
    docstring); prints what each sweep did and what was left. ``autovacuum="server"`` RESETs
    the tables' own autovacuum settings first, to measure without them."""
    import threading

    import psycopg
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from pgflow.conf import pgflow_settings
    from pgflow.runtime import sweep

    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "RETENTION": SUSTAIN_RETENTION}
    seed(0, open_runs)
    table_autovacuum(reset=autovacuum == "server")
    kept_before = open_rows()
    now = timezone.now()
    made_days_of([(now + timedelta(days=n)).date() for n in (0, 1)])
    # Into the live partitions by name, as the engine writes its rows (through the parent, each
    # statement would hold off a day's drop).
    feed_sql = (
        seed_sql("ending")
        .replace("INSERT INTO pgflow_step (", "INSERT INTO pgflow_step_live (")
        .replace("INSERT INTO pgflow_event (", "INSERT INTO pgflow_event_live (")
    )
    params = {k: v for k, v in connection.get_connection_params().items() if k in ("dbname", "user", "host", "port")}
    slice_runs, slice_s = max(1, rate // 5), 0.2
    fed: list[int] = [0]
    stop = threading.Event()
    lagged = [0]

    def feed() -> None:
        with psycopg.connect(**params, autocommit=True) as feeder:
            feeder.execute("SET enable_nestloop = off; SET jit = off")  # a slice is small: JIT cost it 0.7 s
            due = time.monotonic()
            while not stop.is_set():
                feeder.execute(feed_sql, {"runs": slice_runs})
                fed[0] += slice_runs
                due += slice_s
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                else:
                    lagged[0] += 1

    interval = pgflow_settings.seconds("SWEEP_INTERVAL")
    before = stats()
    vacuums = autovacuums()
    feeder = threading.Thread(target=feed, daemon=True)
    began = time.monotonic()
    feeder.start()
    print(f"feeding {rate:,} ended runs a second for {seconds} s; a sweep every {interval:g} s", flush=True)
    print()
    print(
        "| sweep | at s | runs fed so far | filed | purged | sweep s | expired runs left | "
        + " | ".join(f"{t} MB (dead k)" for t in TABLES)
        + " |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(TABLES))
    n = 0
    while time.monotonic() - began < seconds:
        time.sleep(max(0.0, began + (n + 1) * interval - time.monotonic()))
        n += 1
        at = time.monotonic() - began
        counts = sweep.run()
        spent = time.monotonic() - began - at
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pgflow_run WHERE status = 'finished' AND finished_at < now() - %s",
                [SUSTAIN_RETENTION],
            )
            left = cursor.fetchone()[0]
            cursor.execute(
                "SELECT pg_total_relation_size(relid), n_dead_tup FROM pg_stat_user_tables "
                "WHERE relname = ANY(%s) ORDER BY array_position(%s, relname::text)",
                [list(TABLES), list(TABLES)],
            )
            sizes = " | ".join(f"{size / 2**20:.0f} ({dead / 1000:.0f})" for size, dead in cursor.fetchall())
        print(
            f"| {n} | {at:.0f} | {fed[0]:,} | {counts['filed_runs']:,} | {counts['purged_runs']:,} "
            f"| {spent:.1f} | {left:,} | {sizes} |",
            flush=True,
        )
    stop.set()
    feeder.join()
    fed_s = time.monotonic() - began
    after = stats()
    print()
    print(
        f"fed {fed[0]:,} runs in {fed_s:.0f} s ({fed[0] / fed_s:,.0f}/s; {lagged[0]} slices behind their time); "
        f"autovacuum runs meanwhile: {autovacuums() - vacuums}; load {load()}"
    )
    print("| when | " + " | ".join(f"{t} dead / live rows, MB" for t in TABLES) + " | day partitions MB |")
    print("| --- |" + " ---: |" * (len(TABLES) + 1))
    for when, figures in (("before", before), ("after", after)):
        cells = " | ".join(f"{d:,} / {n:,}, {mb:.0f}" for d, n, mb in (figures[t] for t in TABLES))
        print(f"| {when} | {cells} | {figures['days']:.0f} |")
    kept = open_rows()
    print(
        f"open and paused runs kept: {'all ' + str(kept) if kept == kept_before else f'{kept} (before {kept_before})'}"
    )


def day_end(day: date) -> datetime:
    """``day``'s end, UTC: its partitions may go once the cutoff has passed it."""
    return datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)


if __name__ == "__main__":
    main()
