"""pgflow: 3-step ThreeNoops runs, idle latency, memory; measured like the peers.

    /tmp/venv311/bin/python -m benchmarks.peers.pgflow_peer --db URL --work DIR [--workers 2]

``manage.py pgflow_worker --concurrency 32`` (--concurrency or BENCH_PGFLOW_CONCURRENCY to change it), in the database
pgflow_bench on the same PostgreSQL. Steps/s come from the step rows: first claim
(``started_at``) to last finish (``finished_at``); latency and memory as for every peer.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from benchmarks.peers.common import ROOT, System, Workers, main, versions, wait_until

CONCURRENCY = int(os.environ.get("BENCH_PGFLOW_CONCURRENCY", "32"))


class Pgflow(System):
    name = "pgflow"

    def config(self) -> str:
        processes = f" --processes {self.args.processes}" if self.args.processes > 1 else ""
        body = ", Realistic's bodies" if self.args.workflow == "realistic" else ""
        return f"{self.args.workers} x pgflow_worker --concurrency {self.concurrency}{processes} (threads){body}"

    @property
    def concurrency(self) -> int:
        return self.args.concurrency or CONCURRENCY

    def versions(self) -> dict[str, str]:
        # The engine changes under our feet while others optimise it: name the sources measured.
        digest = hashlib.sha1(usedforsecurity=False)
        for path in sorted((ROOT / "pgflow").rglob("*")):
            if path.suffix in (".py", ".sql") and path.is_file():
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
        return {**versions("django-pgflow", "Django", "psycopg"), "pgflow sources": digest.hexdigest()[:10]}

    def prepare(self) -> None:
        os.environ["DATABASE_URL"] = self.args.db
        # The workers' settings (benchmarks/settings.py): Django's default database OPTIONS, as
        # a new project's, unless BENCH_PREPARE_THRESHOLD says otherwise.
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
        from benchmarks import engine  # imported here: it sets Django up for the settings above

        engine.setup_django()
        engine.reset()

    def enqueue_chains(self, runs: int) -> None:
        from benchmarks import engine

        engine.enqueue(runs, self.args.workflow)

    def worker_argv(self) -> list[str]:
        from benchmarks import engine

        argv = engine.worker_command(self.concurrency)[0]
        return argv + (["--processes", str(self.args.processes)] if self.args.processes > 1 else [])

    def worker_env(self) -> dict[str, str]:
        from benchmarks import engine

        return engine.worker_command(self.concurrency)[1]

    def throughput(self, workers: Workers) -> dict[str, Any]:
        from benchmarks import engine

        runs = self.args.runs
        try:
            wait_until(
                lambda: engine.finished_runs() >= runs, self.args.timeout, f"{runs} runs", workers.check_alive, 0.2
            )
            partial = False
        except TimeoutError:
            partial = True
        steps, seconds = engine.step_window()
        if steps < 2 or seconds <= 0:
            raise RuntimeError(f"only {steps} of {3 * runs} steps finished within {self.args.timeout:.0f} s")
        return {
            "steps": steps,
            "seconds": seconds,
            "steps_per_s": steps / seconds,
            "partial": partial or steps < 3 * runs,
        }

    def enqueue_latency_job(self) -> None:
        from benchmarks.peers.pgflow_workflows import StampToFile

        StampToFile.start()  # autocommit: committed when it returns

    def close(self) -> None:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()


if __name__ == "__main__":
    main(Pgflow, __doc__)
