"""A real worker mails the approvers when an approval opens, through Django's filebased email
backend (the file is what an SMTP server would have been given), once, after its commit; a
worker whose SMTP server refuses the connection logs it and the approval goes on."""

from __future__ import annotations

import email
import email.policy
from pathlib import Path

from django.contrib.auth.models import Group

import pgflow
from pgflow.models import WorkflowRun
from tests import approval_workflows as aw
from tests.acceptance.conftest import wait_until
from tests.dashboard_support import make_user

# Long enough that the inbox link passes 78 characters, as a large run id makes it: a mail
# backend may then send the body quoted-printable (mails() decodes it).
BASE_URL = "https://operations.shop.example.com"


def finance(*names):
    group = Group.objects.create(name="finance")
    users = []
    for name in names:
        user = make_user(name)
        user.email = f"{name}@example.com"
        user.save(update_fields=["email"])
        user.groups.add(group)
        users.append(user)
    return users


def mails(folder: Path) -> str:
    """The messages the file backend wrote, each as its headers and its decoded text: a long
    line may be sent quoted-printable (Django 6.1's mail does), its URL split by soft breaks."""
    text = []
    for path in sorted(folder.glob("*.log")):
        for raw in path.read_text().split("\n" + "-" * 79 + "\n"):
            if raw.strip():
                message = email.message_from_string(raw, policy=email.policy.default)
                text.append("".join(f"{name}: {value}\n" for name, value in message.items()))
                text.append(message.get_content())
    return "".join(text)


def finished(run) -> bool:
    return WorkflowRun.objects.get(pk=run.pk).status == "finished"


def test_the_worker_mails_each_approver_once_after_the_commit(start_worker, tmp_path):
    ann, bea = finance("ann", "bea")
    folder = tmp_path / "mail"
    worker = start_worker(
        env={
            "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "EMAIL_FILE_PATH": str(folder),
            "PGFLOW_APPROVAL_EMAIL_BASE_URL": BASE_URL,
        }
    )
    run = aw.Purchase.start(input={"amount": 12}, actor=ann)  # ann requested it: not mailed
    wait_until(lambda: folder.is_dir() and "Decide it in the inbox" in mails(folder), timeout=60, what="the mail")
    written = mails(folder)
    assert f"Subject: [pgflow] Approval waiting: review of Purchase #{run.pk}" in written
    assert "To: bea@example.com" in written and "ann@example.com" not in written
    assert f"Decide it in the inbox: {BASE_URL}/admin/pgflow/inbox/{run.pk}/review/" in written
    assert "Timeout: in 2 days" in written
    assert written.count("Subject: ") == 1

    pgflow.decide(run, "review", user=bea, approve=True)
    wait_until(lambda: finished(run), timeout=60, what="the approved run to finish")
    assert worker.terminate() == 0
    assert mails(folder) == written  # the decision and the rest of the run mailed no one
    assert "mailed 1 approver(s)" in worker.output()


def test_a_refused_smtp_connection_is_logged_and_the_run_goes_on(start_worker):
    (bea,) = finance("bea")
    worker = start_worker(
        env={
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": "9",  # nothing listens: the connection is refused
            "PGFLOW_APPROVAL_EMAIL_BASE_URL": BASE_URL,
        }
    )
    run = aw.Purchase.start()
    wait_until(lambda: "the approval waits all the same" in worker.output(), timeout=60, what="the logged failure")
    pgflow.decide(run, "review", user=bea, approve=True)
    wait_until(lambda: finished(run), timeout=60, what="the approved run to finish")
    assert worker.terminate() == 0
    assert f"run {run.pk}: the approval email of step attempt" in worker.output()
