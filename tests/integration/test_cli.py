"""``manage.py pgflow`` as a script drives it: a real subprocess on the test database, its
``--json`` parsed, its exit codes and the messages of bad arguments read; every change lands
in the run's audit trail with the actor, through the same controls as the admin."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from pgflow.models import Event, Signal, WorkflowRun
from pgflow.testing import run_workflow
from tests import search_workflows as sw

pytestmark = pytest.mark.django_db(transaction=True)  # the subprocess reads what the test committed

ROOT = Path(__file__).resolve().parents[2]


def pgflow(*args: str, stdin: Any = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "PGFLOW_TEST_DB_NAME": connection.settings_dict["NAME"],
    }
    return subprocess.run(
        [sys.executable, "manage.py", "pgflow", *args],
        cwd=ROOT,
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def answer(*args: str) -> dict[str, Any]:
    done = pgflow(*args, "--json")
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def checkout(customer: int, *, amount: int | None = None, decline: bool = False) -> WorkflowRun:
    run = sw.Checkout.start(input={"customer": {"id": customer}, "items": [1], "decline": decline})
    return run_workflow(run, signals={"payment_received": {"amount": amount}} if amount is not None else None)


@pytest.fixture
def shop() -> dict[str, WorkflowRun]:
    return {
        "paid": checkout(1, amount=120),
        "waiting": checkout(2),
        "declined": checkout(3, decline=True),
        "declined_too": checkout(4, decline=True),
    }


def test_runs_lists_by_class_status_and_search_as_json_and_text(shop):
    listed = answer("runs", "--class", "Checkout", "--status", "paused")
    assert {row["run_id"] for row in listed["runs"]} == {shop["declined"].pk, shop["declined_too"].pk}
    assert listed["runs"][0]["workflow_class"] == "tests.search_workflows.Checkout"
    searched = answer("runs", "--search", "output.charge.paid:>100", "--limit", "5")
    assert [row["run_id"] for row in searched["runs"]] == [shop["paid"].pk]
    assert searched["limit"] == 5 and searched["more"] is False
    text = pgflow("runs", "--search", "step:charge")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["RUN", "WORKFLOW", "STATUS", "STEP", "KEY", "STARTED"]
    assert lines[1].split()[:4] == [f"#{shop['waiting'].pk}", "Checkout", "running", "charge"]


def test_show_tells_steps_phases_errors_events_the_timeline_and_why(shop):
    run = shop["declined"]
    shown = answer("show", str(run.pk))
    assert shown["run"]["status"] == "paused"
    assert shown["run"]["input"]["customer"] == {"id": 3}
    assert [(a["step_name"], a["status"]) for a in shown["attempts"]] == [("reserve", "failed")]
    assert shown["attempts"][0]["phases"]["ran"] is not None
    assert shown["errors"][0]["error_class"].endswith("CardDeclined")
    assert "card declined for customer 3" in shown["errors"][0]["error_message"]
    assert [e["event"] for e in shown["events"]][:1] == ["started"]
    assert shown["why"].startswith("paused since ") and "resume after fixing the cause" in shown["why"]
    text = pgflow("show", f"#{shop['paid'].pk}")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"run #{shop['paid'].pk}  tests.search_workflows.Checkout  finished" in out
    assert "why: finished" in out
    assert "timeline: " in out and "  charge #1 " in out and "#" in out.split("charge #1", 2)[-1]
    assert 'output: {"paid": 120, "currency": "EUR"}' in out
    assert "events:" in out and " signal_received by pgflow.testing" in out and " finished by system" in out


def test_a_control_with_dry_run_changes_nothing_then_acts_with_the_actor(shop):
    run = shop["waiting"]
    dry = answer("pause", str(run.pk), "--dry-run", "--actor", "ada")
    assert dry["dry_run"] is True and dry["changed"] is False
    assert dry["would"].startswith("pause the run")
    run.refresh_from_db()
    assert run.status == "running"
    done = answer("pause", str(run.pk), "--actor", "ada")
    assert done["changed"] is True and done["status"] == "paused"
    run.refresh_from_db()
    assert run.status == "paused"
    assert Event.objects.filter(run=run, event="paused").values_list("actor", flat=True).get() == "cli:ada"
    resumed = pgflow("resume", str(run.pk), "--actor", "ada")
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run.pk} resumed by cli:ada; it is running now" in resumed.stdout


def test_a_control_that_does_not_apply_exits_3_naming_the_status(shop):
    done = pgflow("resume", str(shop["paid"].pk))
    assert done.returncode == 3
    assert f"run {shop['paid'].pk}: cannot resume a finished run (only a paused run)" in done.stderr
    as_json = pgflow("skip", str(shop["paid"].pk), "--json")
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["exit_code"] == 3


def test_an_unknown_run_exits_1():
    done = pgflow("show", "987654")
    assert done.returncode == 1
    assert "no workflow run with id 987654" in done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("pause", "abc"), "RUN must be a run id (a whole number such as 12), got 'abc'"),
        (("runs", "--status", "sleeping"), "invalid choice: 'sleeping' (choose from"),
        (("runs", "--search", "since:2x"), "since takes a duration such as 30m, 2h, 2d or 1w"),
        (("runs", "--limit", "0"), "--limit must be a whole number from 1 to 1000, got 0"),
        (("signal", "12"), "signal takes RUN NAME (or NAME with --search)"),
        (("rerun", "12", "--from", "charge", "--input", "[1"), "--input is not JSON"),
        (("rerun", "12", "--from", "charge", "--input", "[1]"), "--input must be a JSON object"),
        (("cancel",), "cancel needs RUN (a run id) or --search Q"),
        (("cancel", "12", "--search", "status:paused"), "give RUN or --search, not both"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
    ],
)
def test_a_bad_argument_exits_2_naming_what_was_wrong(args, says):
    done = pgflow(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert says in done.stderr


def test_a_usage_error_with_json_is_a_json_error_on_stdout_too():
    done = pgflow("runs", "--status", "sleeping", "--json")
    assert done.returncode == 2
    assert "invalid choice: 'sleeping'" in json.loads(done.stdout)["error"]
    assert "invalid choice: 'sleeping'" in done.stderr


def test_a_bad_search_with_json_is_a_json_error_too():
    done = pgflow("runs", "--search", "stauts:paused", "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error["exit_code"] == 2
    assert (
        "unknown qualifier 'stauts'" in error["error"]
        and "status:<running|paused|finished|cancelled>" in error["error"]
    )


def test_a_change_on_a_search_counts_and_needs_confirmation(shop):
    query = "status:paused class:Checkout"
    refused = pgflow("cancel", "--search", query)  # no terminal and no --yes
    assert refused.returncode == 4
    assert "not confirmed: cancel 2 runs matching 'status:paused class:Checkout'?" in refused.stderr
    assert "pass --yes" in refused.stderr
    assert WorkflowRun.objects.filter(status="paused").count() == 2
    dry = answer("cancel", "--search", query, "--dry-run")
    assert dry["matched"] == 2 and len(dry["would"]) == 2 and dry["changed"] == 0
    done = answer("cancel", "--search", query, "--yes", "--actor", "nightly-cleanup")
    assert done["changed"] == 2 and done["refused"] == []
    assert {row["run_id"] for row in done["applied"]} == {shop["declined"].pk, shop["declined_too"].pk}
    assert set(Event.objects.filter(event="cancelled").values_list("actor", flat=True)) == {"cli:nightly-cleanup"}
    nothing = pgflow("cancel", "--search", query, "--yes")
    assert nothing.returncode == 1
    assert "no run matches --search 'status:paused class:Checkout'" in nothing.stderr


def test_a_search_where_some_runs_refuse_applies_the_others_and_exits_3(shop):
    done = pgflow("pause", "--search", "class:Checkout", "--yes", "--json")
    assert done.returncode == 3
    result = json.loads(done.stdout)
    assert [row["run_id"] for row in result["applied"]] == [shop["waiting"].pk]
    assert {row["run_id"] for row in result["refused"]} == {
        shop["paid"].pk,
        shop["declined"].pk,
        shop["declined_too"].pk,
    }


def test_the_confirmation_is_asked_on_a_terminal(shop):
    controller, terminal = pty.openpty()
    try:
        os.write(controller, b"y\n")
        done = pgflow("resume", "--search", "status:paused", "--actor", "ops", stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.returncode == 0, done.stderr
    assert "resume 2 runs matching 'status:paused'? [y/N]" in done.stderr
    assert "2 runs match 'status:paused'; 2 changed:" in done.stdout
    assert WorkflowRun.objects.filter(status="paused").count() == 0


def test_rerun_from_a_step_with_a_new_input(shop):
    run = shop["declined"]
    dry = answer("rerun", str(run.pk), "--from", "reserve", "--dry-run")
    assert dry["would"].startswith("start a new run of Checkout from step reserve")
    assert dry["input"]["decline"] is True
    done = answer("rerun", str(run.pk), "--from", "reserve", "--input", '{"customer": {"id": 3}, "items": [1, 2]}')
    rerun = WorkflowRun.objects.get(pk=done["rerun_id"])
    assert rerun.rerun_of_id == run.pk and rerun.input["items"] == [1, 2]
    assert Event.objects.filter(run=run).order_by("-id").values_list("actor", flat=True).first().startswith("cli:")
    unknown = pgflow("rerun", str(shop["paid"].pk), "--from", "nowhere")
    assert unknown.returncode == 3
    assert "nowhere" in unknown.stderr


def test_signal_delivers_through_pgflow_signal(shop):
    run = shop["waiting"]
    done = answer("signal", str(run.pk), "payment_received", "--payload", '{"amount": 30}', "--actor", "stripe-replay")
    assert done["changed"] is True
    signal = Signal.objects.get(pk=done["signal_id"])
    assert signal.run_id == run.pk and signal.payload == {"amount": 30}
    finished = pgflow("signal", str(shop["paid"].pk), "payment_received")
    assert finished.returncode == 3
    assert "it takes no more signals" in finished.stderr
