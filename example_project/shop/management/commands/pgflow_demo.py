"""``manage.py pgflow_demo``: the README's first command, after the install.

Migrates, creates an admin login, starts a few example runs, then runs a pgflow worker, a
django-q2 cluster and the development server as child processes, prints the admin URL
and the login, and on Ctrl-C or SIGTERM stops every process it started, and the private
PostgreSQL too when this command's settings started it (under ``dev.py demo``, dev.py
started it and stops it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from example_project import pgcluster

ROOT = Path(__file__).resolve().parents[4]
USERNAME = "admin"
PASSWORD = "pgflow-demo"  # noqa: S105 - a local demo login, printed on start


class Command(BaseCommand):
    help = "Run the pgflow demo: worker, django-q2 cluster, admin on http://127.0.0.1:PORT/admin/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--runs", type=int, default=12, help="example runs to start (default 12)")
        parser.add_argument(
            "--history",
            type=int,
            default=3000,
            help="historical runs written once, on a fresh database, for the dashboard (default 3000; 0 for none)",
        )
        parser.add_argument("--no-serve", action="store_true", help="set up, start the runs, and exit")

    def handle(self, *args: Any, port: int, runs: int, history: int, no_serve: bool, **options: Any) -> None:
        if no_serve:
            self.set_up(runs, history)
            return
        # SIGTERM (docker stop, systemd, timeout) stops the demo like Ctrl-C, from the first
        # line on; both set explicitly: a process started in the background inherits SIGINT ignored.
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)
        children: dict[str, subprocess.Popen[bytes]] = {}
        try:
            self.set_up(runs, history)
            children = self.start_children(port)
            self.say(f"admin: http://127.0.0.1:{port}/admin/  login: {USERNAME} / {PASSWORD}")
            self.say(
                "Ctrl-C (or SIGTERM) stops the worker, the django-q2 cluster, the web server"
                + (" and the private PostgreSQL" if pgcluster.started_here else "")
            )
            self.supervise(children)
        except KeyboardInterrupt:
            self.say("stopping")
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            self.stop_children(children)
            pgcluster.stop_started_here()

    def set_up(self, runs: int, history: int) -> None:
        self.say("migrating the database")
        call_command("migrate", interactive=False, verbosity=0)
        self.ensure_admin()
        from example_project.shop.demo import start_example_runs  # lazy: needs the migrated apps
        from pgflow.models import WorkflowRun

        if history and not WorkflowRun.objects.filter(created_at__lt=timezone.now() - timedelta(hours=1)).exists():
            self.say(f"writing {history} runs of history over the last 7 days (once)")
            call_command("shop_history", runs=history, days=7)
        started = start_example_runs(runs)
        self.say(f"started {started} example runs")
        from example_project.shop.demo import fill_admin_sections

        for made in fill_admin_sections(get_user_model().objects.get(username=USERNAME)):
            self.say(f"created {made}")
        self.say(
            "expect ERROR lines: the demo fails on purpose, each message says so: a flaky payment "
            "gateway (reattempted), declined cards (cancelled), vendor 13's inbox (pauses the order)"
        )

    def say(self, message: str) -> None:
        self.stdout.write(f"[pgflow demo] {message}")
        self.stdout.flush()

    def ensure_admin(self) -> None:
        users = get_user_model()
        user = users.objects.filter(username=USERNAME).first()
        if user is None:
            users.objects.create_superuser(USERNAME, "admin@example.com", PASSWORD)
            self.say(f"created the admin login {USERNAME}")

    def start_children(self, port: int) -> dict[str, subprocess.Popen[bytes]]:
        python = sys.executable
        manage = str(ROOT / "manage.py")
        commands = {
            "worker": [python, manage, "pgflow_worker", "--concurrency", "4"],
            "qcluster": [python, manage, "qcluster"],
            "web": [python, manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
        }
        children = {}
        for name, argv in commands.items():
            children[name] = subprocess.Popen(argv, cwd=ROOT, env=os.environ.copy(), start_new_session=True)
            self.say(f"started {name} pid {children[name].pid}: {' '.join(argv[1:])}")
        return children

    def supervise(self, children: dict[str, subprocess.Popen[bytes]]) -> None:
        while True:
            for name, child in children.items():
                if child.poll() is not None:
                    self.say(f"{name} exited with {child.returncode}; stopping the demo")
                    return
            time.sleep(0.5)

    def stop_children(self, children: dict[str, subprocess.Popen[bytes]]) -> None:
        # Each child leads its own process group, so its own children (qcluster's) stop too.
        for child in children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        if children:
            self.say("all processes stopped")


_stopping = False


def _interrupt(signum: int, frame: object) -> None:
    # Once only: `timeout` signals the whole process group and dev.py passes SIGTERM on, so a
    # second signal can arrive while the first is being handled; it must not cut the stop short.
    global _stopping
    if _stopping:
        return
    _stopping = True
    raise KeyboardInterrupt
