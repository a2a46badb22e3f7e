#!/usr/bin/env python
"""What one limited claim costs with many keys due: KEYS runs of ``LimitedNoops`` (every step
under ``Limit(max=2, key="tenant")``), each its own tenant, so KEYS keys have one attempt due
and room. Each sample is one ``store.claim(limit=8)`` in a transaction rolled back (the same
state every time): its wall time, and how many gate rows it held locked at its end (counted
from a second connection, which skips locked rows).

    .venv/bin/python benchmarks/gated_claim.py [--keys 2000 5000] [--samples 20]

Uses its own database (pgflow_bench_gated) on DATABASE_URL's server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import engine  # noqa: E402 - after the path is set

DATABASE = "pgflow_bench_gated"


class Rollback(Exception):
    """Raised to roll a sample's claim back."""


def fill(keys: int) -> None:
    from django.db import connection, transaction

    from benchmarks.workflows import LimitedNoops

    engine.reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE pgflow_gate")
    with transaction.atomic():
        for number in range(keys):
            LimitedNoops.start(input={"tenant": f"t{number}"})
    engine.analyze()


def sample(limit: int) -> tuple[float, int, int]:
    """One claim rolled back: seconds, attempts claimed, gate rows it held locked."""
    import psycopg
    from django.db import connection, transaction

    from pgflow import store

    settings = connection.settings_dict
    other = psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], password=settings["PASSWORD"],
        dbname=settings["NAME"], autocommit=True,
    )  # fmt: skip
    try:
        with transaction.atomic():
            began = time.perf_counter()
            claimed = store.claim(worker="bench", queues=["workflows"], limit=limit)
            took = time.perf_counter() - began
            total = other.execute("SELECT count(*) FROM pgflow_gate").fetchone()[0]
            free = other.execute("SELECT count(*) FROM (SELECT 1 FROM pgflow_gate FOR UPDATE SKIP LOCKED) AS f")
            locked = total - free.fetchone()[0]
            raise Rollback
    except Rollback:
        pass
    finally:
        other.close()
    return took, len(claimed), locked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[2000, 5000])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()
    engine.setup_django(DATABASE)
    print(f"| keys due | claim (limit {args.limit}) median / max ms | attempts claimed | gate rows locked |")
    print("| --- | --- | --- | --- |")
    for keys in args.keys:
        fill(keys)
        results = [sample(args.limit) for _ in range(args.samples + 1)][1:]  # the first warms the connection
        times = [r[0] * 1000 for r in results]
        print(
            f"| {keys:,} | {statistics.median(times):.1f} / {max(times):.1f} | {results[0][1]} | {results[0][2]:,} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
