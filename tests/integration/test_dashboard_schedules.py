"""Schedules in the admin over HTTP: the list, a validated add form, the preview of the
next ticks, pause/resume/start now, the run page's origin line and the insights' lag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils.html import escape

import pgflow
from pgflow import schedules
from pgflow.models import Schedule, WorkflowRun
from tests import schedule_workflows as sw
from tests.dashboard_support import make_user

pytestmark = pytest.mark.django_db

pytest_plugins = ["tests.dashboard_fixtures"]

SCHEDULE_PERMS = ("view_workflowrun", "change_workflowrun", "view_schedule", "change_schedule", "add_schedule")


@pytest.fixture
def scheduler():
    return make_user("scheduler", perms=SCHEDULE_PERMS)


def add_form(**fields):
    data = {
        "workflow_class": sw.Quick.workflow_path(),
        "name": "weekday-mornings",
        "cron": "30 9 * * 1-5",
        "every": "",
        "timezone": "Europe/Amsterdam",
        "input": '{"plan": "pro"}',
        "overlap": "skip",
        "catch_up": "",
    }
    data.update(fields)
    return data


def test_the_add_form_names_the_wrong_field(login, scheduler):
    client = login(scheduler)
    url = reverse("admin:pgflow_schedule_add")
    page = client.post(url, add_form(cron="61 9 * * *", timezone="Mars/Base", input="[1, 2]"))
    assert page.status_code == 200
    errors = page.context["adminform"].form.errors
    assert "is not a valid cron expression" in errors["cron"][0]
    assert "IANA time zone" in errors["timezone"][0]
    assert "input must be a dict (JSON object), got list" in errors["input"][0]
    page = client.post(url, add_form(workflow_class="nowhere.Nothing"))
    assert "workflow_class" in page.context["adminform"].form.errors
    assert not Schedule.objects.filter(name="weekday-mornings").exists()

    page = client.post(url, add_form())
    assert page.status_code == 302
    row = Schedule.objects.get(name="weekday-mornings")
    assert (row.origin, row.input, row.timezone) == ("admin", {"plan": "pro"}, "Europe/Amsterdam")
    assert row.next_tick_at is not None


BIG = '{"blob": "' + "x" * 2_000_000 + '"}'  # 2 MB, over the default MAX_INPUT_BYTES


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


# (field, what is posted, the field's error, the same value declared on a pgflow.Schedule,
# whether the declaration's error has the same words: JSON text that cannot be read has no
# Python twin with the same message, but the value it stands for is refused too)
REFUSED = [
    ("input", '{"note": "a\\u0000b"}', "holds a NUL character", {"note": "a\x00b"}, True),
    ("input", '{"name": "\\udc80"}', "holds a lone surrogate", {"name": "\udc80"}, True),
    ("input", BIG, "at most 1048576 are accepted (PGFLOW['MAX_INPUT_BYTES'])", {"blob": "x" * 2_000_000}, True),
    ("input", "[1, 2]", "input must be a dict (JSON object), got list", [1, 2], True),
    ("input", '{"ratio": NaN}', "NaN is not allowed in JSON", {"ratio": float("nan")}, False),
    ("input", "[" * 100_000, "nested too deeply", {"deep": nested(100_000)}, False),
    ("every", "999999999 00:00:00", "every must be a timedelta of at least 1 second and at most 3650 days", None, True),
    ("catch_up", "-1 00:00:00", "catch_up must be a non-negative timedelta of at most 3650 days", None, True),
    ("catch_up", "5000 00:00:00", "catch_up must be a non-negative timedelta of at most 3650 days", None, True),
]


@pytest.mark.parametrize(("field", "posted", "message", "declared", "same"), REFUSED, ids=[r[2][:30] for r in REFUSED])
def test_the_form_refuses_on_the_field_what_a_declared_schedule_refuses(
    login, scheduler, field, posted, message, declared, same
):
    fields = {field: posted, "cron": "", "every": "01:00:00"} if field != "every" else {field: posted, "cron": ""}
    page = login(scheduler).post(reverse("admin:pgflow_schedule_add"), add_form(**fields))
    assert page.status_code == 200  # the form again, not a 500
    errors = page.context["adminform"].form.errors
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert escape(message) in page.content.decode()
    assert not Schedule.objects.filter(origin="admin").exists()
    # A declared pgflow.Schedule refuses the same value.
    value = declared if declared is not None else page.context["adminform"].form.fields[field].to_python(posted)
    with pytest.raises(pgflow.DefinitionError, match=f"Schedule 'n': {field}") as refused:
        pgflow.Schedule(name="n", **{"every": timedelta(hours=1), field: value})
    if same:
        assert errors[field][0] in str(refused.value)


def test_a_schedule_saved_outside_the_form_is_refused_the_same(settings):
    with pytest.raises(pgflow.DefinitionError, match="catch_up must be a non-negative timedelta"):
        schedules.save(
            Schedule(
                workflow_class=sw.Quick.workflow_path(), name="n", every=timedelta(hours=1), catch_up=timedelta(-1)
            )
        )
    assert not Schedule.objects.filter(origin="admin").exists()


def test_list_preview_actions_and_run_page(login, scheduler):
    row = schedules.save(
        Schedule(workflow_class=sw.Quick.workflow_path(), name="every-15", every=timedelta(minutes=15))
    )
    # Only this schedule fires below: the declared ones other modules register (yearly ticks,
    # synced after each flush) would fire with it in the quarter hour before theirs.
    Schedule.objects.exclude(pk=row.pk).delete()
    client = login(scheduler)
    listing = client.get(reverse("admin:pgflow_schedule_changelist")).content.decode()
    assert "every-15" in listing and "Every 15m" in listing and "active" in listing

    edit = client.get(reverse("admin:pgflow_schedule_change", args=[row.pk])).content.decode()
    preview = edit.split('id="schedule-upcoming"')[1].split("</ol>")[0]
    assert preview.count("<li>") == 5

    changelist = reverse("admin:pgflow_schedule_changelist")
    client.post(changelist, {"action": "pause_schedules", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.paused
    assert "paused" in client.get(changelist).content.decode()
    client.post(changelist, {"action": "resume_schedules", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert not row.paused

    client.post(changelist, {"action": "start_now", "_selected_action": [row.pk]})
    run = WorkflowRun.objects.get()
    assert run.key.startswith(f"schedule:{row.pk}:now:")
    schedules.fire_due(now=row.next_tick_at)
    ticked = WorkflowRun.objects.exclude(pk=run.pk)
    assert ticked.count() == 0  # overlap skip: the started-now run is open
    run.cancel()
    schedules.fire_due(now=row.next_tick_at + timedelta(minutes=15))
    ticked_run = WorkflowRun.objects.exclude(pk=run.pk).get()
    page = client.get(reverse("admin:pgflow_workflowrun_change", args=[ticked_run.pk])).content.decode()
    origin = page.split('id="pgflow-started-by-schedule"')[1].split("</dd>")[0]
    assert "every-15" in origin and "tick " in origin
    assert "started now" in client.get(reverse("admin:pgflow_workflowrun_change", args=[run.pk])).content.decode()


def test_a_code_schedule_is_read_only_but_can_be_paused(login, scheduler):
    schedules.sync()
    row = Schedule.objects.get(workflow_class=sw.Report.workflow_path(), name="nightly")
    client = login(scheduler)
    page = client.get(reverse("admin:pgflow_schedule_change", args=[row.pk]))
    assert 'name="cron"' not in page.content.decode()
    changelist = reverse("admin:pgflow_schedule_changelist")
    client.post(changelist, {"action": "pause_schedules", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.paused


def test_insights_show_lag_and_skipped_ticks_per_schedule(login, scheduler):
    now = datetime.now(UTC)
    row = schedules.save(Schedule(workflow_class=sw.Quick.workflow_path(), name="lagging", every=timedelta(hours=1)))
    Schedule.objects.filter(pk=row.pk).update(next_tick_at=now - timedelta(seconds=2))
    schedules.fire_due()
    Schedule.objects.filter(pk=row.pk).update(next_tick_at=now - timedelta(seconds=1))
    schedules.fire_due()  # the first run is open: skipped
    data = login(scheduler).get("/admin/pgflow/insights.json?window=1h").json()
    (figures,) = [s for s in data["schedules"] if s["name"] == "lagging"]
    assert figures["started"] == 1 and figures["skipped"] == 1 and figures["missed"] == 0
    assert 2.0 <= figures["lag_p50"] < 10
    page = login(scheduler).get("/admin/pgflow/insights/?window=1h").content.decode()
    assert "lagging" in page.split('id="pgflow-schedules"')[1]


def test_a_refused_tick_shows_its_reason_on_the_schedule_page(login, scheduler):
    held = sw.OnePerAccount.start(input={"account": "acme"})  # holds the singleton key
    row = schedules.save(
        Schedule(
            workflow_class=sw.OnePerAccount.workflow_path(),
            name="acme-hourly",
            every=timedelta(hours=1),
            input={"account": "acme"},
        )
    )
    schedules.fire_due(now=row.next_tick_at + timedelta(seconds=1))
    page = login(scheduler).get(reverse("admin:pgflow_schedule_change", args=[row.pk])).content.decode()
    table = page.split('id="schedule-ticks"')[1].split("</table>")[0]
    assert "skipped" in table
    reason = table.split('class="pgflow-tick-reason">')[1].split("</span>")[0]
    assert reason.startswith("the start was refused: SingletonConflict: OnePerAccount is a singleton per key")
    assert f"run #{held.pk}" in reason
