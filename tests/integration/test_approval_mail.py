"""Email to the approvers when an approval opens (PGFLOW["APPROVAL_EMAIL"]), on a real
PostgreSQL with Django's locmem backend: off by default, once per opened approval, only
after the run's transaction commits, to who may decide it, and never breaking the run."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import transaction

import pgflow
from example_project.shop.models import Order
from pgflow.checks import check_settings
from pgflow.testing import run_workflow
from tests import approval_workflows as aw
from tests.dashboard_support import make_user
from tests.rollback import RolledBack

pytestmark = pytest.mark.django_db(transaction=True)

ON = {"BASE_URL": "https://ops.example.com/", "FROM_EMAIL": "Ops <ops@example.com>"}


@pytest.fixture
def emailing(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.PGFLOW = {**settings.PGFLOW, "APPROVAL_EMAIL": ON}
    mail.outbox = []
    return settings


def finance(*names, email=True, **options):
    group, _ = Group.objects.get_or_create(name="finance")
    users = []
    for name in names:
        user = make_user(name, **options)
        user.email = f"{name}@example.com" if email else ""
        user.save(update_fields=["email"])
        user.groups.add(group)
        users.append(user)
    return users


def test_no_mail_by_default(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox = []
    finance("bea")
    run = run_workflow(aw.Purchase.start())
    assert run.steps.get(step_name="review").status == "waiting"
    assert mail.outbox == []


def test_the_approvers_are_mailed_once_with_the_run_step_subject_timeout_and_link(emailing):
    ann, bea, _ = finance("ann", "bea", "cy")
    finance("nomail", email=False)
    (gone,) = finance("gone")
    gone.is_active = False
    gone.save(update_fields=["is_active"])
    finance("customer", staff=False)  # no admin: the inbox is not theirs
    outsider = make_user("olga")
    outsider.email = "olga@example.com"
    outsider.save()
    order = Order.objects.create(customer="ada", email="ada@example.com", total_cents=500)
    run = run_workflow(aw.Purchase.start(subject=order, actor=ann))  # ann requested it
    assert [m.to for m in mail.outbox] == [["bea@example.com"], ["cy@example.com"]]
    sent = mail.outbox[0]
    assert sent.from_email == "Ops <ops@example.com>"
    assert sent.subject == f"[pgflow] Approval waiting: review of Purchase #{run.pk} ({order})"
    assert f"Run: #{run.pk}\nStep: review\nSubject: {order}\n" in sent.body
    assert "Timeout: in 2 days" in sent.body
    assert f"Decide it in the inbox: https://ops.example.com/admin/pgflow/inbox/{run.pk}/review/" in sent.body
    assert "Every approval waiting for you: https://ops.example.com/admin/pgflow/inbox/\n" in sent.body

    run_workflow(run)  # the step still waits: no second mail
    pgflow.decide(run, "review", user=bea, approve=True)
    run = run_workflow(run)
    assert run.status == "finished"
    assert len(mail.outbox) == 2


def test_a_quorum_vote_mails_no_one_again_and_a_permission_finds_its_holders(emailing):
    ann, bea = finance("ann", "bea")
    run = run_workflow(aw.TwoApprovers.start(actor=ann))  # self_approval=True: ann is mailed too
    assert sorted(m.to[0] for m in mail.outbox) == ["ann@example.com", "bea@example.com"]
    pgflow.decide(run, "review", user=ann, approve=True)
    run_workflow(run)
    assert len(mail.outbox) == 2

    mail.outbox = []
    boss = make_user("boss", perms=("change_workflowrun",))
    root = make_user("root", superuser=True)
    for user in (boss, root):
        user.email = f"{user.username}@example.com"
        user.save()
    run_workflow(aw.ByPermission.start())
    assert sorted(m.to[0] for m in mail.outbox) == ["boss@example.com", "root@example.com"]


def test_nothing_is_mailed_before_the_run_commits_nor_when_it_rolls_back(emailing):
    finance("bea")
    with transaction.atomic():
        run = run_workflow(aw.Purchase.start())
        assert run.steps.get(step_name="review").status == "waiting"
        assert mail.outbox == []  # parked, but not committed yet
    assert len(mail.outbox) == 1

    with pytest.raises(RolledBack), transaction.atomic():
        run_workflow(aw.Purchase.start())
        raise RolledBack
    assert len(mail.outbox) == 1


def failures() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("pgflow_approval_emails_total", {"outcome": "failed"}) or 0.0


def test_a_mail_that_fails_is_logged_and_the_approval_goes_on(emailing, caplog):
    # A real SMTP backend to a port nothing listens on: the connection is refused.
    emailing.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    emailing.EMAIL_HOST, emailing.EMAIL_PORT, emailing.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    (bea,) = finance("bea")
    before = failures()
    with caplog.at_level(logging.ERROR, logger="pgflow"):
        run = run_workflow(aw.Purchase.start())
    assert failures() == before + 1  # pgflow_approval_emails_total{outcome="failed"}
    assert run.steps.get(step_name="review").status == "waiting"
    failed = [r for r in caplog.records if getattr(r, "action", "") == "approval_email_failed"]
    assert len(failed) == 1 and failed[0].run_id == run.pk
    assert "the approval waits all the same" in failed[0].getMessage()
    pgflow.decide(run, "review", user=bea, approve=True)
    assert run_workflow(run).status == "finished"


def test_an_approval_with_a_timeout_of_an_hour_says_so(emailing):
    finance("bea")
    run = run_workflow(aw.Expiring.start())
    (sent,) = mail.outbox
    assert "Timeout: in 1 hour" in sent.body and f"Expiring #{run.pk}" in sent.subject
    assert timedelta(hours=1).total_seconds() == aw.Expiring.steps().get("review").wait_timeout


def test_the_system_check_names_a_bad_setting(settings):
    settings.PGFLOW = {**settings.PGFLOW, "APPROVAL_EMAIL": {"BASE_URL": "ops.example.com", "ON": True}}
    errors = [(e.id, e.msg) for e in check_settings()]
    assert (
        "pgflow.E001",
        "unknown key 'ON' in PGFLOW['APPROVAL_EMAIL'] (accepted: BASE_URL, FROM_EMAIL, SUBJECT_PREFIX)",
    ) in errors
    assert any("PGFLOW['APPROVAL_EMAIL']['BASE_URL'] must be the site's address" in msg for _, msg in errors)
    settings.PGFLOW = {**settings.PGFLOW, "APPROVAL_EMAIL": None}
    assert check_settings() == []
