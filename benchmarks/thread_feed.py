#!/usr/bin/env python
"""What handing items to a set of parked threads costs: ``queue.SimpleQueue`` against the
step threads' ``runtime.slots.Feed``, on the interpreter that runs this.

    .venv/bin/python benchmarks/thread_feed.py [--threads 64] [--items 60000]
    /tmp/v313/bin/python benchmarks/thread_feed.py     # a 3.13 virtualenv (RESULTS part N)

One producer keeps ``--threads`` items in flight, as the claim loop keeps the step threads
busy; each thread runs a few µs of Python an item and reports it on one SimpleQueue (the
worker's results go to one queue too). Prints the wall time and the process's CPU an item.
No database: only the interpreter's locks and queues are measured.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pgflow.runtime.slots import Feed  # noqa: E402 - after the path above

SWITCH_INTERVAL = 0.05  # pgflow_worker's


def _work() -> int:
    total = 0
    for number in range(150):
        total += number
    return total


def _drive(put: Callable[[int | None], None], serve: Callable[[], None], *, threads: int, items: int) -> None:
    threads_ = [threading.Thread(target=serve) for _ in range(threads)]
    for thread in threads_:
        thread.start()
    sent = done = 0
    while done < items:
        while sent - done < threads and sent < items:
            put(1)
            sent += 1
        _results.get()
        done += 1
        while True:
            try:
                _results.get_nowait()
            except queue.Empty:
                break
            done += 1
    for _ in threads_:
        put(None)
    for thread in threads_:
        thread.join()


_results: queue.SimpleQueue[int] = queue.SimpleQueue()


def simple_queue(*, threads: int, items: int) -> None:
    feed: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def serve() -> None:
        while (item := feed.get()) is not None:
            _work()
            _results.put(item)

    _drive(feed.put, serve, threads=threads, items=items)


def pgflow_feed(*, threads: int, items: int) -> None:
    feed: Feed[int | None] = Feed()

    def serve() -> None:
        while (item := feed.get()) is not None:
            _work()
            _results.put(item)

    _drive(feed.put, serve, threads=threads, items=items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--items", type=int, default=60_000)
    args = parser.parse_args()
    sys.setswitchinterval(SWITCH_INTERVAL)
    print(f"Python {sys.version.split()[0]}, {args.threads} threads, {args.items:,} items")
    for name, run in (("queue.SimpleQueue", simple_queue), ("runtime.slots.Feed", pgflow_feed)):
        began, cpu = time.perf_counter(), os.times()
        run(threads=args.threads, items=args.items)
        ended, used = time.perf_counter(), os.times()
        user = (used.user - cpu.user) / args.items * 1e6
        system = (used.system - cpu.system) / args.items * 1e6
        cost = f"CPU {user + system:.1f} µs an item (user {user:.1f}, system {system:.1f})"
        print(f"{name:>20}: {ended - began:.2f} s, {cost}")


if __name__ == "__main__":
    main()
