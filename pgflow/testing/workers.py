"""A real ``pgflow_worker`` process on the test's database (the ``pgflow_worker`` fixture).

The worker runs ``python -m django pgflow_worker`` with the test's settings module, wrapped
in a settings module of its own that points every database at the name the test process
uses (pytest-django's ``test_…`` database): nothing in the project's settings needs to know
about tests. It sees committed rows only, so a test using it needs ``transactional_db``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

from ..core.states import RunStatus
from ..models import Worker, WorkflowRun

READY_TIMEOUT = 60.0  # seconds a worker may take to import the project and register itself
STOP_TIMEOUT = 60.0  # seconds SIGTERM gives it to finish its steps before it is killed

_SETTINGS = """\
# Written by pgflow.testing.workers for one test's worker: the project's settings, with
# each database's name the one the test process uses.
from {module} import *  # noqa: F403

_names = {names!r}
DATABASES = {{alias: {{**db, "NAME": _names.get(alias, db.get("NAME"))}} for alias, db in DATABASES.items()}}
"""


class WorkerProcess:
    """One ``pgflow_worker`` process: :meth:`start`, :meth:`stop`, :meth:`output`, and
    :meth:`wait_for` a run to reach a status."""

    def __init__(self, *args: str, folder: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.folder = Path(folder or tempfile.mkdtemp(prefix="pgflow-worker-"))
        self.env = env or {}
        self.log = self.folder / "worker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, *, timeout: float = READY_TIMEOUT) -> WorkerProcess:
        """Start the worker and return once it has registered itself (its ``Worker`` row)."""
        module = f"pgflow_test_settings_{os.getpid()}_{id(self):x}"
        names = {alias: connections[alias].settings_dict["NAME"] for alias in settings.DATABASES}
        project = os.environ.get("DJANGO_SETTINGS_MODULE") or settings.SETTINGS_MODULE
        (self.folder / f"{module}.py").write_text(_SETTINGS.format(module=project, names=names))
        path = os.pathsep.join([str(self.folder), os.getcwd(), *(p for p in sys.path if p)])
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": module, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "pgflow_worker", *self.args],
                env={**env, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not Worker.objects.filter(pid=self.proc.pid).exists():
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"pgflow_worker exited with {code} before it started:\n{self.output()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pgflow_worker did not start within {timeout:.0f}s:\n{self.output()}")
            time.sleep(0.05)
        return self

    def stop(self, *, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, as a supervisor stops it (its steps finish, the rest is handed back); killed
        if it has not exited within ``timeout``. Returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def output(self) -> str:
        """What the worker logged so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, run: Any, *statuses: str, timeout: float = 30.0) -> WorkflowRun:
        """Wait until the run (a ``WorkflowRun`` or its id) is in one of ``statuses`` (by
        default finished or cancelled); returns it refreshed. Raises AssertionError naming
        where it stands, with the worker's output, when it is not within ``timeout``."""
        wanted = set(statuses) or {RunStatus.FINISHED, RunStatus.CANCELLED}
        run_id = run.pk if isinstance(run, WorkflowRun) else run
        deadline = time.monotonic() + timeout
        while True:
            current = WorkflowRun.objects.get(pk=run_id)
            if current.status in wanted:
                return current
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"run {run_id} is {current.status} at step {current.current_step!r} after {timeout:.0f}s, "
                    f"not {' or '.join(sorted(wanted))}; the worker's output:\n{self.output()[-4000:]}"
                )
            time.sleep(0.05)
