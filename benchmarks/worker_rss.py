#!/usr/bin/env python
"""An idle worker's memory: VmRSS of a real ``manage.py pgflow_worker`` on the migrated
benchmark database, and the third-party packages it imported (from ``python -X importtime``).

    .venv/bin/python benchmarks/worker_rss.py [--rounds 3] [--concurrency 8]

Each round launches a worker, lets it settle idle for ``--settle`` seconds (listening, its
threads and pools up), reads /proc/<pid>/status and stops it. The RSS with 1,000 awaiting
async bodies is ``benchmarks/async_bodies.py``'s "peak RSS".
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import engine  # noqa: E402

# Packages a worker needs no part of unless the application uses them (the MCP SDK and its
# web stack, the telemetry extras): listed when a worker imported them.
WATCHED = (
    "mcp",
    "pydantic",
    "starlette",
    "uvicorn",
    "httpx",
    "anyio",
    "sse_starlette",
    "opentelemetry",
    "prometheus_client",
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle_worker(concurrency: int, settle: float) -> tuple[float, set[str]]:
    """One idle worker's VmRSS in MB after ``settle`` seconds, and the watched packages it imported."""
    argv, env = engine.worker_command(concurrency)
    argv = [argv[0], "-X", "importtime", *argv[1:]]
    worker = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(settle)
        if worker.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.returncode}: {worker.stderr.read()[-2000:]}")
        rss = rss_mb(worker.pid)
    finally:
        worker.terminate()
        _, log = worker.communicate(timeout=30)
    imported = set()
    for line in log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name.split(".")[0] in WATCHED:
                imported.add(name.split(".")[0])
    return rss, imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--settle", type=float, default=4.0)
    args = parser.parse_args()
    engine.setup_django()
    engine.reset()
    found = [idle_worker(args.concurrency, args.settle) for _ in range(args.rounds)]
    figures = [rss for rss, _ in found]
    imported = sorted(set().union(*(names for _, names in found)))
    print(
        f"idle worker (--concurrency {args.concurrency}), VmRSS after {args.settle:g} s: median "
        f"{statistics.median(figures):.1f} MB ({', '.join(f'{rss:.1f}' for rss in figures)}); "
        f"optional packages imported: {', '.join(imported) or 'none'}"
    )


if __name__ == "__main__":
    main()
