"""``manage.py pgflow_worker``: parse, validate, build a Worker, run it."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.db.migrations.executor import MigrationExecutor

from pgflow.checks import discover
from pgflow.conf import pgflow_settings
from pgflow.core.definitions import QUEUE_RULE, valid_queue
from pgflow.db import connection
from pgflow.observability import metrics
from pgflow.runtime import logwriter
from pgflow.runtime.processes import Supervisor
from pgflow.runtime.worker import Worker

MAX_CONCURRENCY = 256
# Python's thread switch interval in the worker process, ten times Python's default. The
# worker's threads hand the GIL over at their own waits (a socket, a queue); forced switches
# among dozens of busy threads only pass it back and forth, at every step's expense. A
# CPU-bound body now holds the other threads for up to this long at a time, far inside any
# lease or heartbeat.
SWITCH_INTERVAL = 0.05
MAX_ASYNC_CONCURRENCY = 10_000  # awaiting bodies cost memory, not threads or connections
MAX_PROCESSES = 64


def queue_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one queue name, e.g. --queues workflows,mail")
    for name in names:
        if not valid_queue(name):
            raise argparse.ArgumentTypeError(f"queue names are {QUEUE_RULE}; got {name!r}")
    return names


def whole_number(low: int, high: int, kind: str = "a whole number") -> Callable[[str], int]:
    """An argparse type: ``value`` as an int from ``low`` to ``high``, or an error naming the range."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be {kind} from {low} to {high}, got {value!r}")
        return number

    return parse


concurrency = whole_number(1, MAX_CONCURRENCY)
async_concurrency = whole_number(1, MAX_ASYNC_CONCURRENCY)
processes = whole_number(1, MAX_PROCESSES)
port_number = whole_number(1, 65535, "a TCP port, a whole number")


def unapplied_migrations() -> list[str]:
    """``app.migration`` of each migration of pgflow (and django_q, when installed) the
    database lacks; empty when it cannot be reached, since the worker waits for it then."""
    labels = {"pgflow"} | ({"django_q"} if apps.is_installed("django_q") else set())
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError:
        return []
    finally:
        connection.close()
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan if migration.app_label in labels]


class Command(BaseCommand):
    help = "Run pgflow workflow steps: claim due steps, run them, heartbeat, sweep."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=queue_list,
            default=None,
            help="comma-separated queues to take steps from (default: PGFLOW['QUEUE'])",
        )
        parser.add_argument(
            "--concurrency", type=concurrency, default=4, help="steps run at once, each in its own thread (default: 4)"
        )
        parser.add_argument(
            "--async-concurrency",
            type=async_concurrency,
            default=100,
            help="async def step bodies awaiting at once on the worker's event loop (default: 100)",
        )
        parser.add_argument(
            "--processes",
            type=processes,
            default=1,
            help="worker processes, each with --concurrency threads, under this one (default: 1; one per core "
            "uses every core: a process runs its Python on one at a time)",
        )
        parser.add_argument("--burst", action="store_true", help="run until no step is due, then exit 0")
        parser.add_argument("--name", default=None, help="worker name in logs and leases (default: host:pid:random)")
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            default=None,
            help="serve this worker's Prometheus metrics on this port (needs django-pgflow[metrics]); "
            "with --processes N, process i serves on this port + i",
        )

    def handle(
        self,
        *args: Any,
        queues: list[str] | None,
        concurrency: int,
        burst: bool,
        async_concurrency: int = 100,
        name: str | None,
        metrics_port: int | None = None,
        processes: int = 1,
        verbosity: int = 1,
        **options: Any,
    ) -> None:
        pgflow_logger = logging.getLogger("pgflow")
        if not pgflow_logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            pgflow_logger.addHandler(handler)
        pgflow_logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING)
        missing = unapplied_migrations()
        if missing:
            # Claiming would fail on every poll for ever: say what to do and stop.
            raise CommandError(
                f"the database lacks {len(missing)} migration(s) ({', '.join(missing)}): "
                f"run `python manage.py migrate`, then start the worker again"
            )
        if settings.DEBUG:
            pgflow_logger.warning(
                "DEBUG is on: Django records every query the worker sends, which slows it "
                "down; run workers with DEBUG = False",
                extra={"action": "worker_debug"},
            )
        if metrics_port is not None and not metrics.available():
            raise CommandError("--metrics-port needs prometheus_client: pip install 'django-pgflow[metrics]'")
        if processes > 1:
            if metrics_port is not None and metrics_port + processes - 1 > 65535:
                raise CommandError(f"--metrics-port {metrics_port} + {processes - 1} is past the last TCP port, 65535")

            def argv(index: int) -> list[str]:
                args = ["--concurrency", str(concurrency), "--async-concurrency", str(async_concurrency)]
                args += ["--verbosity", str(verbosity)]
                args += ["--queues", ",".join(queues)] if queues else []
                args += ["--burst"] if burst else []
                args += ["--name", f"{name}-{index}"] if name else []
                args += ["--metrics-port", str(metrics_port + index)] if metrics_port is not None else []
                return args

            code = Supervisor(processes, argv, burst=burst).run()
            if code:
                sys.exit(code)
            return
        # Each installed app's workflows module, imported before the worker works out its
        # claims' kinds (the steps whose claims bring the run's outputs, the async ones) from
        # the classes registered. manage.py's system checks import them too, but a --processes
        # child runs this command through call_command, which skips them, as --skip-checks does.
        problems = discover()
        if problems:
            raise CommandError("; ".join(f"{problem.msg} ({problem.id})" for problem in problems))
        if metrics_port is not None:
            try:
                metrics.serve(metrics_port)
            except OSError as exc:
                raise CommandError(f"--metrics-port {metrics_port}: cannot listen there ({exc})") from exc
        elif not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            metrics.stop_counting()  # nothing would ever read this process's counts
        worker = Worker(
            queues=queues or [pgflow_settings.QUEUE],
            concurrency=concurrency,
            async_concurrency=async_concurrency,
            burst=burst,
            name=name,
        )
        sys.setswitchinterval(SWITCH_INTERVAL)
        # What the process holds by now (Django, the apps, the workflows) lives as long as it
        # does: frozen, the collector's full passes no longer walk it again and again while
        # steps allocate, which took a busy worker's CPU from its steps.
        gc.collect()
        gc.freeze()
        stop_log_writer = logwriter.start() if pgflow_settings.LOG_WRITER else lambda: None
        try:
            code = worker.run()
        finally:
            stop_log_writer()
        if code:
            sys.exit(code)
