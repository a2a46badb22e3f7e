"""Permissions and CSRF of every page and action the second wave added, over HTTP: re-run
(one run and in bulk), schedules (start now, pause, resume), alerts (acknowledge, mute),
queues and tokens. For each: an anonymous visitor is sent to the login page, a view-only
staff user gets 403 or no action, a POST without a CSRF token gets 403, and a user with the
right permission gets it done. Every refusal changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from pgflow.models import AccessToken, Alert, AlertRule, QueueState, Schedule, WorkflowRun
from pgflow.store import now
from pgflow.testing import run_workflow
from pgflow_dashboard.mcp import tokens
from tests import composition_workflows as cw
from tests import schedule_workflows as sw
from tests.dashboard_support import make_user

pytestmark = pytest.mark.django_db(transaction=True)

RUN_VIEW = ("view_workflowrun",)
RUN_CHANGE = ("view_workflowrun", "change_workflowrun")


@dataclass(frozen=True)
class Case:
    name: str
    page: str  # the page the action is on (GET)
    viewer: tuple[str, ...]  # permissions of one who may look but not act
    actor: tuple[str, ...]  # permissions of one who may act
    # Makes a fresh object and returns (url, POST data, "did it happen?")
    setup: Callable[[], tuple[str, dict[str, Any], Callable[[], bool]]]


def paused_run() -> WorkflowRun:
    return run_workflow(cw.Ledger.start(input={"amount": 1, "fail": True}))


def rerun_one():
    run = paused_run()
    url = reverse("admin:pgflow_workflowrun_rerun", args=[run.pk])
    return url, {"step": "charge", "input": '{"amount": 2}'}, lambda: run.reruns.exists()


def rerun_bulk():
    run = paused_run()
    data = {"action": "rerun_failed_runs", "_selected_action": [run.pk], "confirm": "yes"}
    return reverse("admin:pgflow_workflowrun_changelist"), data, lambda: run.reruns.exists()


_schedules = iter(range(10**6))


def schedule(paused: bool = False) -> Schedule:
    admin = Client()
    admin.force_login(make_user(f"schedule-maker-{next(_schedules)}", superuser=True))
    name = f"every-hour-{next(_schedules)}"
    made = admin.post(
        reverse("admin:pgflow_schedule_add"),
        {
            "workflow_class": sw.Quick.workflow_path(),
            "name": name,
            "cron": "",
            "every": "01:00:00",
            "timezone": "UTC",
            "input": "{}",
            "overlap": "skip",
            "catch_up": "",
            **({"paused": "on"} if paused else {}),
        },
    )
    assert made.status_code == 302, made.content
    return Schedule.objects.get(name=name)


def schedule_action(action: str, paused: bool, happened: Callable[[Schedule], bool]):
    def setup():
        row = schedule(paused)
        data = {"action": action, "_selected_action": [row.pk]}
        return reverse("admin:pgflow_schedule_changelist"), data, lambda: happened(Schedule.objects.get(pk=row.pk))

    return setup


def fired_alert() -> Alert:
    rule = AlertRule.objects.create(
        name=f"rule-{next(_schedules)}",
        kind="runs_paused",
        params={"count": 0, "workflow_class": None},
        targets=[],
        cooldown=timedelta(minutes=30),
        created_at=now(),
    )
    return Alert.objects.create(rule=rule, fired_at=now(), value=1, message="1 runs paused")


def acknowledge():
    alert = fired_alert()
    data = {"action": "acknowledge", "_selected_action": [alert.pk]}
    return (
        reverse("admin:pgflow_alert_changelist"),
        data,
        lambda: Alert.objects.get(pk=alert.pk).acknowledged_at is not None,
    )


def mute_from_alert():
    alert = fired_alert()
    data = {"action": "mute_rule", "_selected_action": [alert.pk]}
    muted = lambda: AlertRule.objects.get(pk=alert.rule_id).muted_until is not None  # noqa: E731
    return reverse("admin:pgflow_alert_changelist"), data, muted


def mute_rule():
    rule = fired_alert().rule
    data = {"action": "mute_day", "_selected_action": [rule.pk]}
    muted = lambda: AlertRule.objects.get(pk=rule.pk).muted_until is not None  # noqa: E731
    return reverse("admin:pgflow_alertrule_changelist"), data, muted


def pause_queue():
    queue = f"q{next(_schedules)}"
    data = {"action": "pause", "queue": queue, "confirm": "yes"}
    paused = lambda: QueueState.objects.filter(queue=queue, paused=True).exists()  # noqa: E731
    return reverse("admin:pgflow_queuestate_changelist"), data, paused


def revoke_token():
    token, _ = tokens.issue(make_user(f"token-owner-{next(_schedules)}"), "bot")
    data = {"action": "revoke", "_selected_action": [token.pk]}
    revoked = lambda: AccessToken.objects.get(pk=token.pk).revoked_at is not None  # noqa: E731
    return reverse("admin:pgflow_accesstoken_changelist"), data, revoked


CASES = [
    Case("re-run one run", "admin:pgflow_workflowrun_changelist", RUN_VIEW, RUN_CHANGE, rerun_one),
    Case("re-run in bulk", "admin:pgflow_workflowrun_changelist", RUN_VIEW, RUN_CHANGE, rerun_bulk),
    Case(
        "schedule: start now",
        "admin:pgflow_schedule_changelist",
        ("view_schedule",),
        ("view_schedule", "change_schedule"),
        schedule_action("start_now", False, lambda row: row.ticks.filter(run__isnull=False).exists()),
    ),
    Case(
        "schedule: pause",
        "admin:pgflow_schedule_changelist",
        ("view_schedule",),
        ("view_schedule", "change_schedule"),
        schedule_action("pause_schedules", False, lambda row: row.paused),
    ),
    Case(
        "schedule: resume",
        "admin:pgflow_schedule_changelist",
        ("view_schedule",),
        ("view_schedule", "change_schedule"),
        schedule_action("resume_schedules", True, lambda row: not row.paused),
    ),
    Case(
        "alert: acknowledge",
        "admin:pgflow_alert_changelist",
        ("view_alert",),
        ("view_alert", "change_alert"),
        acknowledge,
    ),
    Case(
        "alert: mute its rule",
        "admin:pgflow_alert_changelist",
        ("view_alert", "view_alertrule"),
        ("view_alert", "change_alertrule"),
        mute_from_alert,
    ),
    Case(
        "alert rule: mute",
        "admin:pgflow_alertrule_changelist",
        ("view_alertrule",),
        ("view_alertrule", "change_alertrule"),
        mute_rule,
    ),
    Case("queue: pause", "admin:pgflow_queuestate_changelist", RUN_VIEW, RUN_CHANGE, pause_queue),
    Case(
        "queue: pause (queue permission)",
        "admin:pgflow_queuestate_changelist",
        ("view_queuestate",),
        ("view_queuestate", "change_queuestate"),
        pause_queue,
    ),
    Case(
        "token: revoke",
        "admin:pgflow_accesstoken_changelist",
        ("view_accesstoken",),
        ("view_accesstoken", "change_accesstoken"),
        revoke_token,
    ),
]


def client(perms: tuple[str, ...] | None, *, csrf: bool = False) -> Client:
    browser = Client(enforce_csrf_checks=csrf)
    if perms is not None:
        browser.force_login(make_user(f"user-{next(_schedules)}", perms=perms))
    return browser


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_action_is_refused_to_whom_it_should_be_and_works_for_the_rest(case: Case) -> None:
    login_page = reverse("admin:login")
    page = reverse(case.page)

    # Anonymous: the login page, for the page and for the action.
    anonymous = client(None)
    assert anonymous.get(page)["Location"].startswith(f"{login_page}?next="), case.name
    url, data, happened = case.setup()
    answer = anonymous.post(url, data)
    assert answer.status_code == 302 and answer["Location"].startswith(login_page), case.name
    assert not happened(), f"{case.name}: done for an anonymous visitor"

    # View-only staff: may look, may not act (403, or the action is not offered and nothing happens).
    viewer = client(case.viewer)
    assert viewer.get(page).status_code == 200, case.name
    answer = viewer.post(url, data)
    assert answer.status_code in (200, 302, 403), case.name
    assert not happened(), f"{case.name}: done for a view-only user"

    # No CSRF token: 403, even with the permission.
    answer = client(case.actor, csrf=True).post(url, data)
    assert answer.status_code == 403 and b"CSRF" in answer.content, case.name
    assert not happened(), f"{case.name}: done without a CSRF token"

    # The right permission: done.
    answer = client(case.actor).post(url, data)
    assert answer.status_code in (200, 302), (case.name, answer.status_code)
    assert happened(), f"{case.name}: not done for a user with {case.actor}"


def test_a_token_is_made_for_oneself_unless_by_a_superuser() -> None:
    # A token acts with its user's permissions: the add permission alone made one for any
    # user, a superuser included, so a staff user could act as the superuser through MCP.
    url = reverse("admin:pgflow_accesstoken_add")
    perms = ("view_accesstoken", "add_accesstoken")
    maker = make_user(f"token-maker-{next(_schedules)}", perms=perms)
    root = make_user(f"root-{next(_schedules)}", superuser=True)
    browser = Client()
    assert Client().post(url, {"user": maker.pk, "name": "bot"})["Location"].startswith(reverse("admin:login"))
    assert client(("view_accesstoken",)).post(url, {"user": maker.pk, "name": "bot"}).status_code == 403
    assert client(perms, csrf=True).post(url, {"user": maker.pk, "name": "bot"}).status_code == 403
    browser.force_login(maker)
    form = browser.get(url).content.decode()
    assert f'<option value="{root.pk}"' not in form and f'<option value="{maker.pk}" selected>' in form
    refused = browser.post(url, {"user": root.pk, "name": "as-root"})
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not AccessToken.objects.filter(user=root).exists()
    assert browser.post(url, {"user": maker.pk, "name": "mine"}).status_code == 200  # the secret, shown once
    assert AccessToken.objects.filter(user=maker, name="mine").exists()
    other = make_user(f"token-owner-{next(_schedules)}")
    browser.force_login(root)
    assert browser.post(url, {"user": other.pk, "name": "theirs"}).status_code == 200
    assert AccessToken.objects.filter(user=other, name="theirs").exists()
