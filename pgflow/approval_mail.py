"""Email to the approvers when an approval opens (``PGFLOW["APPROVAL_EMAIL"]``, off by default).

When an approval step first parks (``pgflow.store.attempts.prepare``), the store runs the
hooks registered with it on the commit of that transaction; :func:`connect` (pgflow's
``AppConfig.ready``) registers :func:`opened`, so the store never imports this feature. A run
whose transaction rolls back mails no one, and nothing is sent while the run's row is locked.
The mail goes through Django's ``send_mail`` machinery (``EMAIL_BACKEND``), one message per
approver so no one sees the others' addresses, to the active staff users who may decide it
(its groups, its permission, not the requester under ``self_approval=False``) and have an
address.

Once per opened approval: asked when the attempt parks for the first time, never again for
the same attempt (a re-run or a resumed run opens a new one). A commit whose worker dies
before the mail is sent loses that mail, never the run. A mail that fails (an SMTP server
down, a template error) is logged (``approval_email_failed``) and counted
(``pgflow_approval_emails{outcome="failed"}``); the run goes on as if it had been sent.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, get_connection
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from .approvals import Approval
from .conf import pgflow_settings
from .core import approvalmail
from .deciding import approval_of, requester
from .models import Step, WorkflowRun
from .observability import metrics
from .store.attempts import on_approval_opened

logger = logging.getLogger("pgflow")

INBOX_URL_NAME = "pgflow_inbox"  # pgflow_dashboard.inbox's, reversed by name: no import upward
DECIDE_URL_NAME = "pgflow_inbox_decide"


def enabled() -> bool:
    return pgflow_settings.APPROVAL_EMAIL is not None


def connect() -> None:
    """Register :func:`opened` with the store (pgflow's ``AppConfig.ready``; once however often)."""
    on_approval_opened(opened)


def opened(run_id: int, step_id: int) -> None:
    """An approval step parked for the first time and its transaction committed: mail its
    approvers (nothing when ``PGFLOW["APPROVAL_EMAIL"]`` is None)."""
    if enabled():
        send(run_id, step_id)


def send(run_id: int, step_id: int) -> int:
    """Mail the approvers of the approval ``step_id`` parks on; how many were mailed. Never
    raises: a failure is logged and counted, and the run does not hear of it."""
    try:
        sent = _send(run_id, step_id)
    except Exception:
        logger.exception(
            "run %s: the approval email of step attempt %s failed; the approval waits all the same",
            run_id,
            step_id,
            extra={"action": "approval_email_failed", "run_id": run_id, "step_id": step_id},
        )
        metrics.approval_email("failed")
        return 0
    if sent:
        metrics.approval_email("sent", sent)
    return sent


def _send(run_id: int, step_id: int) -> int:
    step = Step.objects.select_related("run").filter(pk=step_id, run_id=run_id, status="waiting").first()
    if step is None:
        return 0  # decided (or cancelled) before the commit's mail went out: nothing to ask
    run = step.run
    approval = approval_of(run, step.step_name)
    who = requester(run, approval) if not approval.self_approval else None
    addresses = recipients(approval, requester=who)
    if not addresses:
        logger.info(
            "run %s: approval %s opened with no approver to mail (active staff with an email address)",
            run.pk,
            step.step_name,
            extra={"action": "approval_email_nobody", "run_id": run.pk, "step": step.step_name},
        )
        return 0
    mail = approvalmail.parse(pgflow_settings.APPROVAL_EMAIL)
    timeout_in = (step.deadline_at - timezone.now()).total_seconds() if step.deadline_at else None
    title, body = approvalmail.compose(
        mail,
        workflow=run.workflow_name,
        run_id=run.pk,
        step=step.step_name,
        subject=_subject(run),
        quorum=approval.quorum,
        timeout_in=timeout_in,
        link=mail.base_url + _path(DECIDE_URL_NAME, run.pk, step.step_name),
        inbox=mail.base_url + _path(INBOX_URL_NAME),
    )
    sender = mail.from_email or settings.DEFAULT_FROM_EMAIL
    messages = [EmailMessage(title, body, sender, [address]) for address in addresses]
    sent = get_connection().send_messages(messages) or 0
    logger.info(
        "run %s: approval %s opened, mailed %s approver(s)",
        run.pk,
        step.step_name,
        sent,
        extra={"action": "approval_email_sent", "run_id": run.pk, "step": step.step_name, "count": sent},
    )
    return sent


def recipients(approval: Approval, *, requester: str | None) -> list[str]:
    """The addresses of the active staff users who may decide ``approval`` (the inbox is in
    the admin): in one of its groups, holding its permission (a superuser holds every one),
    not the ``requester`` (given only under ``self_approval=False``)."""
    users = get_user_model()
    if approval.permission:
        found = users._default_manager.with_perm(approval.permission, is_active=True)
    else:
        found = users._default_manager.filter(is_active=True)
    found = found.filter(is_staff=True).exclude(Q(email="") | Q(email__isnull=True))
    if approval.groups:
        found = found.filter(groups__name__in=list(approval.groups))
    if requester is not None:
        found = found.exclude(**{users.USERNAME_FIELD: requester})
    return sorted(set(found.values_list("email", flat=True)))


def _subject(run: WorkflowRun) -> str:
    if run.subject_type_id is None or run.subject_id is None:
        return ""
    found = run.subject
    return str(found) if found is not None else f"{run.subject_type} #{run.subject_id}"


def _path(name: str, *args: object) -> str:
    """A path of the dashboard's inbox on the admin site (the site's root without the dashboard)."""
    try:
        return reverse(f"admin:{name}", args=args)
    except NoReverseMatch:
        return "/"
