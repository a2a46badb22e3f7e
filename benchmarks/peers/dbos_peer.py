"""DBOS Transact: a workflow of three steps on a queue, idle latency, memory.

    benchmarks/.work/peers-venv/dbos/bin/python -m benchmarks.peers.dbos_peer --db URL --work DIR

One DBOS process (benchmarks/peers/dbos_app.py) serving one queue, its system database a
database of its own on the same PostgreSQL; workflows are enqueued with DBOSClient.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.peers import dbos_app
from benchmarks.peers.common import System, main, recreate_database, versions

DATABASE = "bench_dbos"


class Dbos(System):
    name = "dbos"
    client: Any = None

    def config(self) -> str:
        return (
            f"1 process, queue worker_concurrency {dbos_app.WORKER_CONCURRENCY}, polled every "
            f"{dbos_app.POLLING_INTERVAL} s, workflow of 3 @DBOS.step"
        )

    def versions(self) -> dict[str, str]:
        return versions("dbos", "SQLAlchemy", "psycopg")

    def prepare(self) -> None:
        from dbos import DBOSClient

        self.url = recreate_database(self.args.db, DATABASE).replace("postgres://", "postgresql://", 1)
        # The client never migrates: the CLI creates the system tables.
        subprocess.run(
            [str(Path(sys.executable).parent / "dbos"), "migrate", "-s", self.url], check=True, capture_output=True
        )
        self.client = DBOSClient(system_database_url=self.url)

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_DB_URL": self.url}

    def enqueue_chains(self, runs: int) -> None:
        for _ in range(runs):
            self.client.enqueue({"workflow_name": "three_steps", "queue_name": dbos_app.QUEUE})

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.peers.dbos_app"]

    def enqueue_latency_job(self) -> None:
        self.client.enqueue({"workflow_name": "one_step", "queue_name": dbos_app.QUEUE})

    def close(self) -> None:
        if self.client is not None:
            self.client.destroy()


if __name__ == "__main__":
    main(Dbos, __doc__)
