"""``pgflow_worker --processes N``: one command, N real worker processes under it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from pgflow.models import Step, WorkflowRun
from tests import workflows as wf
from tests.acceptance.conftest import ROOT, wait_until
from tests.discovered_app.workflows import ReadsOutputsFirst
from tests.invariants import assert_exactly_once


def children(worker) -> list[int]:
    """The pids of the worker processes that said they started (worker names are host:pid:…)."""
    return [int(pid) for pid in re.findall(r"worker [^:\s]+:(\d+):\w+ starting: queues=", worker.output())]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but is not reaped yet is a zombie: gone for our purposes.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


def test_two_processes_share_the_runs_and_stop_together_on_sigterm(start_worker, marks):
    runs = [wf.ThreeSteps.start() for _ in range(300)]
    worker = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(
        lambda: WorkflowRun.objects.filter(status="finished").count() == len(runs),
        timeout=120,
        what="300 runs to finish",
    )
    wait_until(lambda: len(children(worker)) == 2, timeout=30, what="both processes to say they started")
    pids = children(worker)
    names = set(Step.objects.values_list("worker", flat=True))
    assert len(names) == 2, names  # both processes claimed
    assert {int(name.split(":")[1]) for name in names} == set(pids)
    assert worker.terminate() == 0
    assert not [pid for pid in pids if alive(pid)], "a worker process outlived the command"
    assert worker.output().count("stopped:") == 2
    assert_exactly_once()
    assert sorted(marks.read_text().split()) == sorted(
        f"{run.pk}:{name}:1" for run in runs for name in ("one", "two", "three")
    )


def test_sigterm_lets_every_process_finish_its_running_step(start_worker, marks):
    runs = [wf.Sleeper.start(input={"sleep": 2}) for _ in range(2)]
    worker = start_worker("--processes", "2", "--concurrency", "1")
    wait_until(
        lambda: all(f"{run.pk}:nap:1" in marks.read_text() for run in runs), timeout=60, what="both bodies to start"
    )
    assert len(set(Step.objects.values_list("worker", flat=True))) == 2  # one body in each process
    assert worker.terminate() == 0
    assert set(WorkflowRun.objects.values_list("status", flat=True)) == {"finished"}
    assert list(Step.objects.values_list("outcome", flat=True).distinct()) == ["completed"]
    assert "0 handed back" in worker.output()


def test_a_worker_process_that_dies_is_started_again(start_worker):
    worker = start_worker("--processes", "2", "--concurrency", "2")
    wait_until(lambda: len(children(worker)) == 2, timeout=60, what="both processes to start")
    victim = children(worker)[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(children(worker)) == 3, timeout=60, what="a third process to start")
    assert f"(pid {victim}) was killed by signal 9; starting it again" in worker.output()
    run = wf.ThreeSteps.start()
    wait_until(lambda: WorkflowRun.objects.filter(pk=run.pk, status="finished").exists(), timeout=60, what="a run")
    assert worker.terminate() == 0
    assert not [pid for pid in children(worker) if alive(pid)]


def test_worker_processes_stop_when_their_parent_is_killed(start_worker):
    worker = start_worker("--processes", "2", "--concurrency", "1")
    wait_until(lambda: len(children(worker)) == 2, timeout=60, what="both processes to start")
    pids = children(worker)
    worker.kill9()
    wait_until(lambda: not [pid for pid in pids if alive(pid)], timeout=30, what="the orphaned processes to stop")
    assert worker.output().count("stopped:") == 2  # each drained and unregistered itself


def test_processes_out_of_range_is_a_clear_error():
    result = subprocess.run(
        [sys.executable, "manage.py", "pgflow_worker", "--processes", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--processes: must be a whole number from 1 to 64, got '0'" in result.stderr


def test_a_metrics_port_range_past_the_last_port_is_refused(start_worker):
    worker = start_worker("--processes", "3", "--metrics-port", "65534")
    assert worker.proc.wait(60) == 1
    assert "--metrics-port 65534 + 2 is past the last TCP port, 65535" in worker.output()


def test_a_worker_that_skipped_the_checks_still_knows_which_steps_read_outputs(start_worker):
    # manage.py's system checks import each app's workflows module; --skip-checks skips them,
    # as call_command does for a --processes child. The worker imports those modules itself
    # now. tests.workflows is no app's: the first claim of one of its classes (an `a` step,
    # all the runs wait there) imports it, and the claims after bring the outputs its `b`
    # bodies read. (With --processes 2, a child's first claim of the class may be a `b`: that
    # one body reads them with a query.)
    runs = [wf.CountsItsReads.start() for _ in range(6)]
    worker = start_worker("--skip-checks", "--concurrency", "2")
    _wait_finished(runs)
    assert worker.terminate() == 0
    outputs = Step.objects.filter(run__in=runs, step_name="b").values_list("output", flat=True)
    assert list(outputs) == [{"n": 1, "queries": 0}] * len(runs)
    assert_exactly_once()


def test_a_worker_that_skipped_the_checks_imports_the_apps_workflows_modules(start_worker):
    # tests.discovered_app's workflows module is an installed app's that nothing imports: the
    # worker does, as it starts, so even its first claims of the class (all of them, none
    # after another) know the step reads outputs and bring them.
    runs = [ReadsOutputsFirst.start() for _ in range(4)]
    worker = start_worker(
        "--skip-checks", "--concurrency", "1", env={"DJANGO_SETTINGS_MODULE": "tests.discovery_settings"}
    )
    _wait_finished(runs)
    assert worker.terminate() == 0
    outputs = Step.objects.filter(run__in=runs).values_list("output", flat=True)
    assert list(outputs) == [{"outputs": {}, "queries": 0}] * len(runs)
    assert_exactly_once()


def _wait_finished(runs: list[WorkflowRun]) -> None:
    pks = [run.pk for run in runs]
    wait_until(
        lambda: WorkflowRun.objects.filter(pk__in=pks, status="finished").count() == len(pks),
        timeout=60,
        what="the runs to finish",
    )


def spawned(parent: int) -> set[int]:
    """The pids of the live processes whose parent is ``parent``."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(") ", 1)[1].split()[1]) == parent:
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return found


def test_a_stop_while_the_processes_start_is_a_clean_exit(start_worker):
    # A SIGTERM while the children were still starting: one not yet listed by the parent got
    # no stop (the parent waited for it for ever), and one still setting Django up died of
    # the signal, which made the command exit 1 on a routine restart.
    worker = start_worker("--processes", "3", "--concurrency", "1")
    wait_until(lambda: "starting 3 worker processes" in worker.output(), timeout=30, what="the command to start")
    kids = spawned(worker.proc.pid)
    worker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and worker.proc.poll() is None:
        kids |= spawned(worker.proc.pid)
        time.sleep(0.01)
    assert worker.proc.wait(60) == 0, worker.output()
    assert kids, "no worker process seen"
    wait_until(lambda: not [pid for pid in kids if alive(pid)], timeout=10, what="the worker processes to exit")
    assert "exited with" not in worker.output() and "killed by signal" not in worker.output()
