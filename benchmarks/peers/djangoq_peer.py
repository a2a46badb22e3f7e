"""django-q2: 3-step chains (``async_chain`` of three tasks), idle latency, memory.

    benchmarks/.work/peers-venv/django-q2/bin/python -m benchmarks.peers.djangoq_peer --db URL --work DIR

One ``qcluster`` (its sentinel, monitor, pusher and two worker processes) with the ORM
broker, in its own database on the same PostgreSQL; settings in djangoq_settings.py.
"""

from __future__ import annotations

import os
import sys

from benchmarks.peers.common import System, main, recreate_database, versions

DATABASE = "bench_djangoq"
TASK = "benchmarks.peers.djangoq_tasks"


class DjangoQ(System):
    name = "django-q2"

    def config(self) -> str:
        return (
            "1 qcluster, 2 worker processes (default), ORM broker polling every 0.2 s (default), "
            "async_chain of 3 tasks, every result kept (save_limit 0: the default 250 prunes on every save, "
            "~33 steps/s here)"
        )

    def versions(self) -> dict[str, str]:
        return versions("django-q2", "Django", "psycopg")

    def prepare(self) -> None:
        self.url = recreate_database(self.args.db, DATABASE)
        os.environ["BENCH_DB_URL"] = self.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.peers.djangoq_settings"
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0, interactive=False)

    def worker_env(self) -> dict[str, str]:
        return {"BENCH_DB_URL": self.url, "DJANGO_SETTINGS_MODULE": "benchmarks.peers.djangoq_settings"}

    def enqueue_chains(self, runs: int) -> None:
        from django_q.tasks import async_chain

        for _ in range(runs):
            async_chain([(f"{TASK}.step", (1,)), (f"{TASK}.step", (2,)), (f"{TASK}.step", (3,))])

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "django", "qcluster"]

    def enqueue_latency_job(self) -> None:
        from django_q.tasks import async_task

        async_task(f"{TASK}.latency")  # autocommit: committed when it returns

    def discard_backlog(self) -> bool:
        from django_q.models import OrmQ

        OrmQ.objects.all().delete()  # the tasks already handed to the pusher and workers still run
        return True

    def close(self) -> None:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()


if __name__ == "__main__":
    main(DjangoQ, __doc__)
