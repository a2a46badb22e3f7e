"""The run list, the run page, its controls and timeline.json, over HTTP."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from pgflow.models import Event, Signal, Step, WorkflowRun
from pgflow.testing import run_workflow
from pgflow_dashboard.admin import runs as dashboard_admin
from tests import dashboard_workflows as dw
from tests import workflows as wf
from tests.dashboard_support import changelist_url, control_url, messages_of, run_url, timeline_url

# run_workflow runs steps the way a worker does, which needs real transactions.
pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = dw.SCRIPT.encode()
ESCAPED = b"&lt;script&gt;alert(&#x27;pgflow&#x27;)&lt;/script&gt;"


def html(response) -> str:
    return response.content.decode()


# --- the run list -----------------------------------------------------------------------------


def test_the_list_shows_each_runs_facts(login, viewer):
    subject = User.objects.create_user("subject-user")
    paused = run_workflow(dw.Hostile.start(subject=subject, input={"text": "hi"}))
    finished = run_workflow(wf.ThreeSteps.start(key="order-7"))
    later = dw.Later.start()
    page = login(viewer).get(changelist_url())
    assert page.status_code == 200
    text = html(page)
    for run in (paused, finished, later):
        assert f'href="{run_url(run)}' in text
    assert "Hostile" in text and 'title="tests.dashboard_workflows.Hostile"' in text
    assert f"auth.user #{subject.pk}" in text
    assert 'class="pgflow-status pgflow-status-paused pgflow-doing-paused"' in text
    assert 'class="pgflow-status pgflow-status-finished pgflow-doing-finished"' in text
    # The reason names the current step, and what holds it there.
    assert "paused since " in text and "step explode (attempt 1) failed with ValueError" in text
    assert "step later is due at " in text


def test_the_list_filters_by_status_class_created_and_error(login, viewer):
    paused = run_workflow(dw.Hostile.start())
    finished = run_workflow(wf.ThreeSteps.start())
    later = dw.Later.start()
    client = login(viewer)

    def listed(query: str) -> set[int]:
        response = client.get(f"{changelist_url()}?{query}")
        assert response.status_code == 200, query
        return {run.pk for run in response.context["cl"].result_list}

    assert listed("status__exact=paused") == {paused.pk}
    assert listed("status__exact=running") == {later.pk}
    assert listed("workflow_class=tests.workflows.ThreeSteps") == {finished.pk}
    assert listed("error_class=ValueError") == {paused.pk}
    assert listed("error_class=KeyError") == set()
    hour_ago = (timezone.now() - timedelta(hours=1)).isoformat().replace("+", "%2B")
    in_an_hour = (timezone.now() + timedelta(hours=1)).isoformat().replace("+", "%2B")
    assert listed(f"created_at__gte={hour_ago}") == {paused.pk, finished.pk, later.pk}
    assert listed(f"created_at__gte={in_an_hour}") == set()
    # The class filter offers each class once, by its name.
    page = html(client.get(changelist_url()))
    assert page.count("?workflow_class=tests.workflows.ThreeSteps") == 1
    assert "By workflow class" in page


def test_search_finds_runs_by_id_key_and_subject(login, viewer):
    subject = User.objects.create_user("searched")
    by_subject = dw.Later.start(subject=subject)
    by_key = dw.Later.start(key="invoice-2024-0042")
    other = dw.Later.start()
    client = login(viewer)

    def found(term: str) -> set[int]:
        response = client.get(changelist_url(), {"q": term})
        assert response.status_code == 200
        return {run.pk for run in response.context["cl"].result_list}

    assert found(str(other.pk)) == {other.pk}
    assert found(f"#{other.pk}") == {other.pk}
    assert found("invoice-2024-0042") == {by_key.pk}
    assert found("2024-00") == {by_key.pk}
    assert str(subject.pk) in {str(by_subject.subject_id)}
    assert by_subject.pk in found(str(subject.pk))
    assert found("no such thing") == set()
    assert found("99999999999999999999999") == set()  # past bigint: no error, no match


def test_the_list_pages_and_its_query_count_does_not_grow_with_rows(login, viewer, django_assert_max_num_queries):
    client = login(viewer)
    for _ in range(3):
        dw.Later.start()
    with django_assert_max_num_queries(14) as few:  # 14: the saved views' names, the inbox count
        assert client.get(changelist_url()).status_code == 200
    for _ in range(60):
        dw.Later.start()
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get(changelist_url())
    assert len(response.context["cl"].result_list) == 50  # list_per_page
    assert response.context["cl"].result_count == 63


def test_bulk_actions_report_per_run_what_applied_and_what_did_not(login, operator):
    running = dw.Later.start()
    finished = run_workflow(wf.ThreeSteps.start())
    client = login(operator)
    response = client.post(
        changelist_url(),
        {"action": "pause_runs", "_selected_action": [running.pk, finished.pk], "confirm": "yes"},
        follow=True,
    )
    said = messages_of(response)
    assert f"Paused 1 run: #{running.pk}." in said
    assert (f"Not paused: 1 run: run {finished.pk}: cannot pause a finished run (only a running run).") in said
    assert WorkflowRun.objects.get(pk=running.pk).status == "paused"
    assert Event.objects.get(run=running, event="paused").actor == "user:operator"

    response = client.post(
        changelist_url(), {"action": "resume_runs", "_selected_action": [running.pk], "confirm": "yes"}, follow=True
    )
    assert f"Resumed 1 run: #{running.pk}." in messages_of(response)
    assert WorkflowRun.objects.get(pk=running.pk).status == "running"

    response = client.post(
        changelist_url(),
        {"action": "cancel_runs", "_selected_action": [running.pk, finished.pk], "confirm": "yes"},
        follow=True,
    )
    said = messages_of(response)
    assert f"Cancelled 1 run: #{running.pk}." in said
    assert any("cannot cancel a finished run" in message for message in said)
    assert WorkflowRun.objects.get(pk=running.pk).status == "cancelled"
    assert Event.objects.get(run=running, event="cancelled").actor == "user:operator"


def test_a_bulk_action_first_asks_with_the_count_and_records_the_reason_given(login, operator):
    running = [dw.Later.start() for _ in range(2)]
    finished = run_workflow(wf.ThreeSteps.start())
    client = login(operator)
    selected = [*(run.pk for run in running), finished.pk]
    page = client.post(changelist_url(), {"action": "cancel_runs", "_selected_action": selected})
    text = " ".join(page.content.decode().split())
    assert page.status_code == 200
    assert "Cancel: <strong>2</strong> of the 3 selected runs would be cancelled" in text
    assert "cannot cancel a finished run" in text
    assert 'name="reason"' in text
    assert set(WorkflowRun.objects.filter(pk__in=selected).values_list("status", flat=True)) == {"running", "finished"}

    too_long = {"action": "cancel_runs", "_selected_action": selected, "confirm": "yes", "reason": "x" * 121}
    refused = client.post(changelist_url(), too_long)
    assert refused.status_code == 400
    assert "the reason has 121 characters; at most 120 are recorded" in refused.content.decode()
    assert WorkflowRun.objects.get(pk=running[0].pk).status == "running"

    confirmed = {"action": "cancel_runs", "_selected_action": selected, "confirm": "yes", "reason": "duplicate orders"}
    response = client.post(changelist_url(), confirmed, follow=True)
    assert f"Cancelled 2 runs: #{running[0].pk}, #{running[1].pk}." in messages_of(response)
    for run in running:
        event = Event.objects.get(run=run, event="cancelled")
        assert event.actor == "user:operator (reason: duplicate orders)"


def test_a_bulk_action_over_too_many_runs_is_refused_whole_and_long_lists_are_cut(login, operator, monkeypatch):

    runs = [dw.Later.start() for _ in range(4)]
    client = login(operator)
    monkeypatch.setattr(dashboard_admin, "MAX_BULK_RUNS", 3)
    response = client.post(
        changelist_url(),
        {"action": "pause_runs", "_selected_action": [run.pk for run in runs], "confirm": "yes"},
        follow=True,
    )
    assert messages_of(response) == [
        "Nothing paused: 4 runs are selected and one action takes at most 3; "
        "narrow the list with the filters or the search first."
    ]
    assert set(WorkflowRun.objects.filter(pk__in=[run.pk for run in runs]).values_list("status", flat=True)) == {
        "running"
    }

    monkeypatch.setattr(dashboard_admin, "MAX_LISTED_APPLIED", 2)
    response = client.post(
        changelist_url(),
        {"action": "pause_runs", "_selected_action": [run.pk for run in runs[:3]], "confirm": "yes"},
        follow=True,
    )
    assert messages_of(response) == [f"Paused 3 runs: #{runs[0].pk}, #{runs[1].pk} and 1 more."]


# --- the run page -----------------------------------------------------------------------------


def test_the_run_page_shows_facts_steps_errors_and_audit_trail(login, viewer):
    subject = User.objects.create_user("page-subject")
    run = run_workflow(dw.Hostile.start(subject=subject, input={"text": "hello"}, key="k-1"))
    page = login(viewer).get(run_url(run))
    assert page.status_code == 200
    text = html(page)
    assert "tests.dashboard_workflows.Hostile" in text
    assert f'href="/admin/auth/user/{subject.pk}/change/"' in text
    assert "k-1" in text
    assert run.definition_digest[:16] in text
    assert "the class's current definition" in text
    # One row per attempt, with its phases in words.
    steps = page.context["steps"]
    assert [(s["step_name"], s["status"], s["outcome"]) for s in steps] == [
        ("emit", "completed", "completed"),
        ("explode", "failed", "paused"),
    ]
    assert set(steps[0]["durations"]) == {"waited", "throttled", "queued", "ran", "waiting"}
    assert steps[0]["durations"]["waiting"] == "—"
    assert steps[0]["durations"]["ran"].endswith("s")
    # The error, its cause chain and backtrace.
    assert "ValueError" in text and "KeyError" in text
    assert "Traceback (most recent call last)" in text
    assert "dashboard_workflows.py" in text
    # The audit trail.
    assert [e["event"] for e in page.context["events"]] == ["started", "step_completed", "step_failed", "paused"]
    # The chart's data is in the page.
    assert 'id="pgflow-timeline-data"' in text and 'id="pgflow-timeline-config"' in text


def test_every_string_from_a_run_is_escaped(login, operator):
    run = run_workflow(dw.Hostile.start(input={"text": dw.SCRIPT}))
    # A signal with a hostile name and payload, delivered through the page itself.
    client = login(operator)
    waiting = run_workflow(dw.AwaitsApproval.start(input={"text": dw.SCRIPT}))
    response = client.post(
        control_url(waiting),
        {"action": "signal", "name": dw.SCRIPT, "payload": json.dumps({"note": dw.SCRIPT}), "send_anyway": "on"},
    )
    assert response.status_code == 302
    for target in (run, waiting):
        page = client.get(run_url(target))
        assert page.status_code == 200
        assert SCRIPT not in page.content, target
        assert ESCAPED in page.content
    # timeline.json: JSON that no browser may sniff as HTML, and the payload holds no raw markup.
    timeline = client.get(timeline_url(run))
    assert timeline.status_code == 200
    assert timeline["Content-Type"] == "application/json"
    assert timeline["X-Content-Type-Options"] == "nosniff"
    assert SCRIPT not in timeline.content
    assert timeline.json()["rows"]
    # The list escapes too (paused_reason is not there, the class name is).
    assert SCRIPT not in client.get(changelist_url()).content


def test_the_step_table_shows_outputs_as_escaped_json(login, viewer):
    run = run_workflow(dw.Hostile.start(input={"text": "echoed"}))
    page = login(viewer).get(run_url(run))
    assert b"&quot;echo&quot;: &quot;echoed&quot;" in page.content


def test_a_changed_definition_and_a_missing_class_are_flagged(login, viewer):
    changed = dw.Later.start()
    WorkflowRun.objects.filter(pk=changed.pk).update(definition_digest="0" * 64)  # started on an older definition
    gone = dw.Later.start()
    WorkflowRun.objects.filter(pk=gone.pk).update(workflow_class="tests.dashboard_workflows.Removed")
    client = login(viewer)
    text = html(client.get(run_url(changed)))
    assert "definition changed since this run started" in text
    text = html(client.get(run_url(gone)))
    assert "class no longer imports" in text
    assert "tests.dashboard_workflows.Removed" in text
    assert "definition changed since this run started" not in html(client.get(run_url(dw.Later.start())))


def test_signals_pending_and_consumed_are_listed(login, operator):
    run = run_workflow(dw.AwaitsApproval.start())
    client = login(operator)
    client.post(control_url(run), {"action": "signal", "name": "unrelated", "payload": '{"a": 1}', "send_anyway": "on"})
    client.post(control_url(run), {"action": "signal", "name": "approval", "payload": "true"})
    run = run_workflow(run)
    page = client.get(run_url(run))
    assert run.status == "finished"
    assert [s.name for s in page.context["pending_signals"]] == ["unrelated"]
    assert [s.name for s in page.context["consumed_signals"]] == ["approval"]
    assert "pending" in html(page)


def test_an_open_run_polls_its_timeline_and_a_closed_one_does_not(login, viewer):
    client = login(viewer)
    open_run = dw.Later.start()
    config = client.get(run_url(open_run)).context["chart_config"]
    assert config["url"] == timeline_url(open_run)
    assert config["poll_ms"] == 5000
    closed = run_workflow(wf.ThreeSteps.start())
    assert client.get(run_url(closed)).context["chart_config"]["poll_ms"] is None


def test_a_run_with_many_attempts_loads_in_a_bounded_number_of_queries(login, viewer, django_assert_max_num_queries):
    run = dw.Later.start()
    client = login(viewer)
    with django_assert_max_num_queries(20) as few:
        assert client.get(run_url(run)).status_code == 200
    start = run.created_at
    Step.objects.bulk_create(
        Step(
            run=run,
            step_name="later",
            attempt=n + 2,
            status="failed",
            outcome="reattempted",
            queue="workflows",
            created_at=start + timedelta(seconds=n),
            scheduled_at=start + timedelta(seconds=n),
            started_at=start + timedelta(seconds=n, milliseconds=5),
            finished_at=start + timedelta(seconds=n, milliseconds=50),
            error_class="ConnectionError",
            error_message="down",
        )
        for n in range(300)
    )
    with django_assert_max_num_queries(len(few.captured_queries) + 1):
        page = client.get(run_url(run))
    assert len(page.context["steps"]) == 301
    assert len(page.context["chart"]["rows"]) == 301


# --- controls -----------------------------------------------------------------------------------


def test_each_button_calls_the_runs_control_with_the_user_as_actor(login, operator):
    client = login(operator)
    run = dw.Later.start()
    for action, status, event in (
        ("pause", "paused", "paused"),
        ("resume", "running", "resumed"),
        ("skip", "running", "skipped"),
        ("cancel", "cancelled", "cancelled"),
    ):
        response = client.post(control_url(run), {"action": action}, follow=True)
        assert response.redirect_chain[-1][0] == run_url(run), action
        assert WorkflowRun.objects.get(pk=run.pk).status == status, action
        latest = Event.objects.filter(run=run, event=event).order_by("-id").first()
        assert latest is not None and latest.actor == "user:operator", action
        assert any(f"Run {run.pk}" in message for message in messages_of(response)), action
    # Skipping moved the run on to its next step.
    assert WorkflowRun.objects.get(pk=run.pk).current_step == "after"


def test_a_skip_posted_from_a_page_seen_earlier_or_twice_skips_only_the_step_shown(login, operator):
    # The skip button posts the step its page showed: a second click, or a page left open
    # while the run moved on, must not skip the step after it.
    import re

    client = login(operator)
    run = dw.Later.start()
    page = client.get(run_url(run)).content.decode()
    form = re.search(r'<form method="post"[^>]*>((?:(?!</form>).)*name="action" value="skip".*?)</form>', page, re.S)
    posted = dict(re.findall(r'<input type="hidden" name="(action|step)" value="([^"]*)">', form[1]))
    assert posted == {"action": "skip", "step": "later"}
    client.post(control_url(run), posted)
    again = client.post(control_url(run), posted, follow=True)
    assert f"run {run.pk}: its current step is 'after', not 'later'; nothing was skipped" in messages_of(again)
    assert WorkflowRun.objects.get(pk=run.pk).current_step == "after"
    assert Event.objects.filter(run=run, event="skipped").count() == 1


def test_a_control_that_does_not_apply_says_why_and_changes_nothing(login, operator):
    run = dw.Later.start()
    response = login(operator).post(control_url(run), {"action": "resume"}, follow=True)
    assert f"run {run.pk}: cannot resume a running run (only a paused run)" in messages_of(response)
    assert list(WorkflowRun.objects.get(pk=run.pk).events.values_list("event", flat=True)) == ["started"]


def test_an_unknown_action_is_a_400_naming_the_choices(login, operator):
    run = dw.Later.start()
    response = login(operator).post(control_url(run), {"action": "explode"})
    assert response.status_code == 400
    assert b"unknown action 'explode' (one of resume, skip, pause, cancel, signal)" in response.content


def test_the_page_offers_only_the_controls_that_apply(login, operator):
    client = login(operator)
    run = dw.Later.start()
    assert [c["action"] for c in client.get(run_url(run)).context["controls"]] == ["skip", "pause", "cancel"]
    run.pause()
    assert [c["action"] for c in client.get(run_url(run)).context["controls"]] == ["resume", "skip", "cancel"]
    run.cancel()
    page = client.get(run_url(run))
    assert page.context["controls"] == []
    assert b'name="action"' not in page.content


def test_send_signal_delivers_the_json_payload(login, operator):
    run = run_workflow(dw.AwaitsApproval.start())
    assert run.status == "running"
    response = login(operator).post(
        control_url(run), {"action": "signal", "name": "approval", "payload": '{"by": "ops", "ok": true}'}, follow=True
    )
    assert "Signal 'approval' sent to run" in messages_of(response)[0]
    received = Signal.objects.get(run=run)
    assert (received.name, received.payload) == ("approval", {"by": "ops", "ok": True})
    assert Event.objects.get(run=run, event="signal_received").actor == "user:operator"
    assert run_workflow(run).steps.last().output == {"approved": {"by": "ops", "ok": True}}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"name": "approval", "payload": "{not json"}, "the payload is not valid JSON: Expecting property name"),
        ({"name": "approval", "payload": "NaN"}, "the payload is not valid JSON: NaN is not allowed in JSON"),
        ({"name": "", "payload": "{}"}, "This field is required."),
        ({"name": "x" * 201, "payload": "{}"}, "Ensure this value has at most 200 characters"),
    ],
)
def test_a_bad_signal_is_a_400_with_a_clear_error_and_nothing_sent(login, operator, data, error):
    run = run_workflow(dw.AwaitsApproval.start())
    response = login(operator).post(control_url(run), {"action": "signal", **data})
    assert response.status_code == 400
    assert error in html(response)
    # The form keeps what was typed.
    assert response.context["signal_form"].data["payload"] == data["payload"]
    assert not Signal.objects.filter(run=run).exists()


def test_a_signal_to_an_ended_run_is_refused_with_the_engines_message(login, operator):
    run = run_workflow(wf.ThreeSteps.start())
    response = login(operator).post(control_url(run), {"action": "signal", "name": "late", "payload": ""})
    assert response.status_code == 400
    assert f"run {run.pk} is finished: it takes no more signals" in html(response)
    assert not Signal.objects.filter(run=run).exists()


# --- timeline.json ---------------------------------------------------------------------------------


def test_timeline_json_serves_the_chart_of_the_run(login, viewer):
    run = run_workflow(dw.Hostile.start())
    response = login(viewer).get(timeline_url(run))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert set(data) == {"rows", "paused", "status", "now", "attempts"}
    assert [row["label"] for row in data["rows"]] == ["emit #1", "explode #1"]
    assert data["rows"][1]["error_class"] == "ValueError"
    assert {segment["series"] for segment in data["rows"][1]["segments"]} <= {"waited", "queued", "ran_failed"}
    assert data["status"] == "paused"
    # The run is paused now: one open pause band, up to now.
    (band,) = data["paused"]
    assert band["to"] == data["now"]
    assert isinstance(band["from"], int) and band["duration"]


def test_the_page_details_the_latest_errors_and_lists_every_one(login, viewer):
    run = dw.Later.start()
    start = run.created_at
    Step.objects.bulk_create(
        Step(
            run=run,
            step_name="later",
            attempt=n + 2,
            status="failed",
            outcome="reattempted",
            queue="workflows",
            created_at=start + timedelta(seconds=n),
            scheduled_at=start + timedelta(seconds=n),
            started_at=start + timedelta(seconds=n),
            finished_at=start + timedelta(seconds=n, milliseconds=5),
            error_class="ConnectionError",
            error_message=f"refused #{n}",
            error_backtrace=f"trace #{n}",
        )
        for n in range(40)
    )
    page = login(viewer).get(run_url(run))
    text = html(page)
    assert "The latest 25 of 40 failed attempts" in text
    assert "trace #39" in text and "trace #14" not in text
    assert "refused #0" in text  # the step table still lists it
    assert len(page.context["failed_steps"]) == 25
