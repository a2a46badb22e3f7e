"""pgflow's pytest plugin (``pgflow.testing.pytest_plugin``, loaded by the package's pytest11
entry point): the clock moves pgflow's time in the database and runs what came due, so a
wait's timeout, a schedule's catch-up, an alert's cooldown, a lost lease and retention are
tested without sleeping; ``assert_steps`` and ``pgflow_replace_step``."""

from __future__ import annotations

import os
from datetime import timedelta
from importlib import metadata
from pathlib import Path

import pytest
from django.db import connection
from django.test import TestCase

import pgflow
from pgflow import step
from pgflow.models import Alert, Schedule, ScheduleTick, Step, WorkflowRun
from pgflow.testing import Clock, assert_steps, replace_step, run_workflow
from pgflow.testing.clock import KEEP, TIMES, time_columns
from tests import pytest_plugin_workflows as pw
from tests import workflows as wf

pytest_plugins = ["pytester"]

CALLED: list[dict] = []


def record(body: dict) -> None:
    CALLED.append(body)


class Reminds(pgflow.Workflow):
    @step
    def welcome(self):
        return "welcome"

    @step(wait=timedelta(days=3))
    def remind(self):
        return "reminded"


class WaitsLater(pgflow.Workflow):
    @step(wait=timedelta(hours=1))
    def first(self):
        return "first"

    @step(wait_for="go", wait_timeout=timedelta(days=1), on_timeout="skip")
    def hold(self, signal):
        return "went"

    @step
    def last(self):
        return "last"


# --- the columns the clock moves -------------------------------------------------------------


def test_every_time_column_of_pgflows_models_is_listed():
    listed = {(column.model, column.field) for column in TIMES}
    missing = sorted(set(time_columns()) - listed)
    assert not missing, f"add these to pgflow.testing.clock.TIMES (and say what compares them): {missing}"
    assert not listed - set(time_columns()), "TIMES lists a column that is gone"
    assert ("Step", "deadline_at") in listed and ("Gate", "starts") in listed
    assert all(column.compared for column in TIMES)
    assert {column.model for column in TIMES if column.how == KEEP} == {"Schedule", "ScheduleTick", "Offer"}


def test_the_plugin_is_loaded_by_the_entry_point(request):
    points = metadata.entry_points(group="pytest11")
    assert "pgflow.testing.pytest_plugin" in {point.value for point in points}
    assert request.config.pluginmanager.get_plugin("pgflow").__name__ == "pgflow.testing.pytest_plugin"


# --- a signal's wait_timeout ----------------------------------------------------------------


def test_a_signal_wait_times_out_and_its_on_timeout_runs(pgflow_clock):
    run = run_workflow(wf.WaitsForPayment.start())
    assert_steps(run, ["order:completed", "charge:waiting"])
    pgflow_clock.advance(minutes=59)
    assert WorkflowRun.objects.get(pk=run.pk).status == "running", "an hour's wait_timeout is not up yet"
    done = pgflow_clock.advance(timedelta(minutes=2))
    assert done.sweep["wait_timeouts"] == 1
    assert WorkflowRun.objects.get(pk=run.pk).status == "cancelled"
    assert_steps(run, ["order:completed", "charge:cancelled"])


def test_a_signal_before_the_timeout_moves_the_run_on(pgflow_clock):
    run = run_workflow(wf.WaitsForPayment.start())
    pgflow_clock.advance(minutes=30)
    pgflow.signal(run, "payment", 10)
    pgflow_clock.advance(timedelta(0))  # runs what is due now: the woken step, then the next
    assert WorkflowRun.objects.get(pk=run.pk).status == "finished"
    assert_steps(run, ["order", "charge:completed", "ship"])


def test_a_delayed_step_runs_when_its_wait_is_over(pgflow_clock):
    run = run_workflow(Reminds.start(), skip_waits=False)
    assert_steps(run, ["welcome", "remind:scheduled"])
    pgflow_clock.advance(days=2, hours=23)
    assert_steps(run, ["welcome", "remind:scheduled"])
    done = pgflow_clock.advance(hours=1)
    assert run.pk in done.runs  # (with the runs of any schedule whose ticks came due too)
    assert_steps(run, ["welcome", "remind:completed"])


def test_an_advance_stops_at_each_due_time_in_order(pgflow_clock):
    run = WaitsLater.start()
    pgflow_clock.advance(days=1)  # first runs at +1 h; its wait's deadline is then +1 d 1 h
    assert_steps(run, ["first:completed", "hold:waiting"])
    run = WaitsLater.start()
    done = pgflow_clock.advance(days=1, hours=1)  # in one advance: +1 h, then +1 d 1 h
    assert done.sweep["wait_timeouts"] == 2
    assert_steps(run, ["first", "hold:skipped", "last:completed"])


def test_a_paused_queues_steps_wait_for_it_to_resume(pgflow_clock):
    run = wf.ThreeSteps.start()
    pgflow.pause_queue("workflows")
    pgflow_clock.advance(minutes=5)
    assert_steps(run, ["one:scheduled"])
    pgflow.resume_queue("workflows")
    pgflow_clock.run_due()
    assert_steps(run, ["one", "two", "three:completed"])


# --- a schedule's catch-up ------------------------------------------------------------------


@pytest.fixture
def Hourly():  # noqa: N802 - the class
    with pw.declared(pw.Hourly) as workflow:  # for this test only (see its module)
        yield workflow


def test_a_schedule_catches_up_the_ticks_within_catch_up_and_records_the_missed(pgflow_clock, Hourly):  # noqa: N803
    pgflow_clock.advance(timedelta(0))  # syncs the declared schedules
    row = Schedule.objects.get(workflow_class=Hourly.workflow_path(), name="hourly")
    first = row.next_tick_at
    assert first > pgflow_clock.now
    done = pgflow_clock.advance(hours=5)
    assert done.schedules >= 1  # (and those of any other class a test declared)
    ticks = list(ScheduleTick.objects.filter(schedule=row).order_by("tick_at").values_list("outcome", "tick_at"))
    # Ticks at first, +1h … +4h are due; those more than catch_up (3 h) late are missed.
    assert ticks[0] == ("missed", first)
    assert [outcome for outcome, _ in ticks[1:]] == ["started"] * 3
    assert [at - first for _, at in ticks[1:]] == [timedelta(hours=h) for h in (2, 3, 4)]
    runs = Hourly.runs().order_by("pk")
    assert [run.status for run in runs] == ["finished"] * 3, "the caught-up runs ran"
    assert Schedule.objects.get(pk=row.pk).next_tick_at == first + timedelta(hours=5)


# --- an alert's cooldown ---------------------------------------------------------------------


def test_an_alert_fires_then_waits_its_cooldown_before_firing_again(pgflow_clock, settings):
    settings.PGFLOW = {
        **settings.PGFLOW,
        "ALERTS": [
            {
                "name": "paused runs",
                "kind": "runs_paused",
                "count": 0,
                "cooldown": timedelta(minutes=30),
                "targets": [{"callable": "tests.integration.test_pytest_plugin.record"}],
            }
        ],
    }
    CALLED.clear()
    run = run_workflow(wf.WaitsForPayment.start())  # waits an hour for its payment
    run.pause()
    pgflow_clock.advance(seconds=1)
    assert [body["event"] for body in CALLED] == ["fired"], "delivered by the advance"
    run.resume()
    pgflow_clock.advance(seconds=1)
    run.pause()
    pgflow_clock.advance(minutes=10)
    assert Alert.objects.filter(rule__name="paused runs").count() == 1, "within its cooldown"
    pgflow_clock.advance(minutes=25)
    assert Alert.objects.filter(rule__name="paused runs").count() == 2
    assert [body["event"] for body in CALLED] == ["fired", "resolved", "fired"]


# --- a lease running out ----------------------------------------------------------------------


def test_an_attempt_whose_lease_runs_out_is_recovered_by_the_sweep(pgflow_clock):
    from pgflow import store

    run = wf.ThreeSteps.start()
    first = Step.objects.get(run=run)
    assert store.claim_step(first.pk, worker="a-worker-that-dies") is not None  # and never heartbeats
    pgflow_clock.advance(seconds=30)
    assert Step.objects.get(pk=first.pk).status == "in_progress", "the lease (60 s) still holds"
    done = pgflow_clock.advance(seconds=31)
    assert done.sweep["lost_leases"] == 1
    assert WorkflowRun.objects.get(pk=run.pk).status == "finished"
    assert_steps(run, ["one:lost", "one:completed", "two", "three"])


# --- retention --------------------------------------------------------------------------------


def test_a_finished_run_is_purged_once_past_retention(pgflow_clock, Hourly):  # noqa: N803
    run = run_workflow(wf.ThreeSteps.start())
    rerun = run_workflow(run.rerun_from("three"))  # names run as the one it re-ran
    kept = run_workflow(wf.TwoApprovals.start())  # open (it waits, no timeout): never purged
    pgflow_clock.advance(hours=1)
    ticked = Hourly.runs().get()  # its schedule's tick (and last_run) name it
    pgflow_clock.advance(days=29)
    assert WorkflowRun.objects.filter(pk__in=[run.pk, rerun.pk, ticked.pk]).count() == 3
    done = pgflow_clock.advance(days=2)  # RETENTION: 30 days
    assert done.sweep["purged_runs"] >= 3  # (and the runs of any other schedule declared)
    assert not WorkflowRun.objects.filter(pk__in=[run.pk, rerun.pk, ticked.pk]).exists()
    assert WorkflowRun.objects.get(pk=kept.pk).status == "running"
    ticks = ScheduleTick.objects.filter(schedule__workflow_class=Hourly.workflow_path(), outcome="started")
    assert ticks.filter(run__isnull=True).count() == 1, "its tick stays, naming no run"
    connection.check_constraints()  # what the sweep's commit checks: no row names a purged run


# --- the clock itself -------------------------------------------------------------------------


def test_now_adds_up_the_advances_and_rows_move_back(pgflow_clock):
    run = wf.ThreeSteps.start()
    created = WorkflowRun.objects.get(pk=run.pk).created_at
    start = pgflow_clock.now
    done = pgflow_clock.advance(hours=2, run_due=False)
    assert timedelta(hours=2) <= pgflow_clock.now - start < timedelta(hours=2, seconds=5)
    assert done.now == pytest.approx(pgflow_clock.now, abs=timedelta(seconds=5))
    assert WorkflowRun.objects.get(pk=run.pk).created_at == created - timedelta(hours=2)
    assert WorkflowRun.objects.get(pk=run.pk).status == "running", "run_due=False runs nothing"


def test_the_rollup_still_counts_each_run_once_after_an_advance_off_the_hour(pgflow_clock):
    from django.db.models import Sum

    from pgflow.models import RunRollup

    run_workflow(wf.ThreeSteps.start())
    pgflow_clock.advance(hours=2)  # its hour is closed and rolled
    rolled = RunRollup.objects.filter(workflow_class=wf.ThreeSteps.workflow_path(), hours=1)
    assert rolled.aggregate(n=Sum("finished"))["n"] == 1
    pgflow_clock.advance(minutes=30)  # the rollup moves by whole hours, its hours counted again
    assert rolled.aggregate(n=Sum("finished"))["n"] == 1


def test_advance_refuses_what_is_not_a_move_forward(pgflow_clock):
    with pytest.raises(ValueError, match="only moves forward.*got -1 day"):
        pgflow_clock.advance(timedelta(seconds=-1))
    with pytest.raises(TypeError, match="takes a timedelta.*got 5"):
        pgflow_clock.advance(5)
    with pytest.raises(TypeError, match="got weeks="):
        pgflow_clock.advance(weeks=1)
    with pytest.raises(TypeError, match="needs how far"):
        pgflow_clock.advance()


class ClockInATestCase(TestCase):
    """Django's TestCase: the clock works inside its transaction, and the rollback undoes it."""

    def test_a_wait_times_out(self):
        clock = Clock()
        run = run_workflow(wf.WaitsForPayment.start())
        clock.advance(hours=2)
        self.assertEqual(WorkflowRun.objects.get(pk=run.pk).status, "cancelled")
        assert_steps(run, ["order", "charge:cancelled"])


# --- assert_steps and pgflow_replace_step -----------------------------------------------------


def test_assert_steps_shows_both_histories_and_where_they_part(db):
    run = run_workflow(wf.WaitsForPayment.start())
    with pytest.raises(AssertionError) as failed:
        assert_steps(run, ["order", "charge:completed", "ship"])
    message = str(failed.value)
    assert f"the steps of WaitsForPayment #{run.pk} (running) are not the ones expected" in message
    lines = message.splitlines()[1:]
    assert lines[0].split() == ["expected", "actual"]
    assert lines[1].split() == ["1", "order", "order", "(completed)"]
    assert lines[2].split() == [">", "2", "charge:completed", "charge", "(waiting)"]
    assert lines[3].split() == [">", "3", "ship", "—"]
    with pytest.raises(TypeError, match="takes a list of step names"):
        assert_steps(run, "order")


def test_a_replaced_body_runs_for_the_test_only(db, pgflow_replace_step):
    def two(self):
        return {"n": 20}

    pgflow_replace_step(wf.ThreeSteps, "two", two)
    run = run_workflow(wf.ThreeSteps.start())
    assert run.outputs == {"one": {"n": 1}, "two": {"n": 20}, "three": {"n": 21}}


def test_replace_step_restores_the_body_and_names_the_steps(db):
    def failing(self):
        raise ConnectionError("the gateway is down")

    with replace_step(wf.ThreeSteps, "two", failing):
        run = run_workflow(wf.ThreeSteps.start())
    assert run.status == "paused"
    assert_steps(run, ["one", "two:failed"])
    assert run_workflow(wf.ThreeSteps.start()).outputs["three"] == {"n": 3}, "restored"
    with pytest.raises(ValueError, match="ThreeSteps has no step 'four'; its steps: one, two, three"):
        with replace_step(wf.ThreeSteps, "four", failing):
            pass


# --- installing pgflow is enough --------------------------------------------------------------

PROJECT_TEST = """
from datetime import timedelta

import pgflow
from pgflow import step
from pgflow.testing import assert_steps


class Waits(pgflow.Workflow):
    @step(wait_for="go", wait_timeout=timedelta(days=1), on_timeout="skip")
    def hold(self, signal):
        return "went"

    @step
    def after(self):
        return "after"


def test_the_wait_times_out(pgflow_clock):
    run = Waits.start()
    pgflow_clock.advance(hours=23)
    assert_steps(run, ["hold:waiting"])
    pgflow_clock.advance(hours=1)
    assert_steps(run, ["hold:skipped", "after:completed"])
"""


def test_a_projects_test_gets_the_fixtures_from_the_install_alone(pytester, monkeypatch):
    """A project's test file, with no conftest and no pytest_plugins: the entry point is enough."""
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PGFLOW_TEST_DATABASE", f"{connection.settings_dict['NAME']}_project")
    pytester.makepyfile(test_project=PROJECT_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=240)
    result.assert_outcomes(passed=1)
    without = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:pgflow", "-q", timeout=240)
    without.stdout.fnmatch_lines(["*fixture 'pgflow_clock' not found*"])


def test_the_child_runs_of_a_fan_out_run_and_the_parent_resumes(pgflow_clock):
    from tests import composition_workflows as cw

    run = cw.Parent.start(input={"n": 3})
    pgflow_clock.run_due()
    run.refresh_from_db()
    assert run.status == "finished"
    assert WorkflowRun.objects.filter(parent=run).count() == 3
    assert set(WorkflowRun.objects.filter(parent=run).values_list("status", flat=True)) == {"finished"}
