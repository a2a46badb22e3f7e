"""The approval email's shape: ``PGFLOW["APPROVAL_EMAIL"]`` checked with messages naming what
is accepted, and the mail an opened approval sends its approvers. Pure: no Django, no mail.

Off by default (None). A dict turns it on; the worker then mails each approver once, after
the commit that parks an approval step (``pgflow.approval_mail``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULTS: dict[str, Any] = {
    "BASE_URL": None,  # required: "https://ops.example.com", the admin's inbox link starts with it
    "FROM_EMAIL": None,  # None: Django's DEFAULT_FROM_EMAIL
    "SUBJECT_PREFIX": "[pgflow] ",
}
EXAMPLE = {"BASE_URL": "https://ops.example.com"}
_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60))


@dataclass(frozen=True)
class MailSettings:
    base_url: str  # without its trailing slash
    from_email: str | None
    subject_prefix: str


def problems(raw: Any) -> list[str]:
    """Every problem with a ``PGFLOW["APPROVAL_EMAIL"]`` value (None: no approval email)."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [
            f"PGFLOW['APPROVAL_EMAIL'] must be None (no email) or a dict such as {EXAMPLE!r}, got {type(raw).__name__}"
        ]
    found = [
        f"unknown key {key!r} in PGFLOW['APPROVAL_EMAIL'] (accepted: {', '.join(DEFAULTS)})"
        for key in raw
        if key not in DEFAULTS
    ]
    base = raw.get("BASE_URL")
    if not (isinstance(base, str) and base.startswith(("https://", "http://")) and len(base) > len("https://")):
        found.append(
            "PGFLOW['APPROVAL_EMAIL']['BASE_URL'] must be the site's address the mail links to, "
            f"starting with https:// or http:// (e.g. 'https://ops.example.com'), got {base!r}"
        )
    sender = raw.get("FROM_EMAIL")
    if sender is not None and not (isinstance(sender, str) and "@" in sender):
        found.append(
            "PGFLOW['APPROVAL_EMAIL']['FROM_EMAIL'] must be None (DEFAULT_FROM_EMAIL) or an address "
            f"such as 'pgflow@example.com' or 'Ops <ops@example.com>', got {sender!r}"
        )
    prefix = raw.get("SUBJECT_PREFIX", "")
    if not isinstance(prefix, str) or "\n" in prefix or "\r" in prefix:
        found.append(f"PGFLOW['APPROVAL_EMAIL']['SUBJECT_PREFIX'] must be a one-line string, got {prefix!r}")
    return found


def parse(raw: dict[str, Any]) -> MailSettings:
    values = {**DEFAULTS, **raw}
    return MailSettings(
        base_url=str(values["BASE_URL"]).rstrip("/"),
        from_email=values["FROM_EMAIL"],
        subject_prefix=values["SUBJECT_PREFIX"],
    )


def in_words(seconds: float) -> str:
    """``"2 days"``, ``"5 hours"``, ``"1 day 3 hours"``: how long is left, up to the next
    minute (a two-day timeout read a moment after it was set is still "2 days")."""
    total = max(math.ceil(seconds / 60) * 60, 0)
    words: list[str] = []
    for name, size in _UNITS:
        count, total = divmod(total, size)
        if count and len(words) < 2:
            words.append(f"{count} {name}{'' if count == 1 else 's'}")
        elif words:
            break  # "1 day 3 hours", never "1 day 0 hours 4 minutes"
    return " ".join(words) or "less than a minute"


def compose(
    mail: MailSettings,
    *,
    workflow: str,
    run_id: int,
    step: str,
    subject: str,
    quorum: int,
    timeout_in: float | None,
    link: str,
    inbox: str = "",
) -> tuple[str, str]:
    """The subject line and the plain-text body of the mail an opened approval sends;
    ``link``: its decide page, ``inbox``: the inbox (both absolute URLs)."""
    title = f"{mail.subject_prefix}Approval waiting: {step} of {workflow} #{run_id}"
    if subject:
        title += f" ({subject})"
    lines = [
        f"The {workflow} run #{run_id} waits for an approval of its step {step!r}.",
        "",
        f"Workflow: {workflow}",
        f"Run: #{run_id}",
        f"Step: {step}",
    ]
    if subject:
        lines.append(f"Subject: {subject}")
    lines.append(f"Approvals needed: {quorum}")
    if timeout_in is None:
        lines.append("Timeout: none, it waits until someone decides")
    else:
        lines.append(f"Timeout: in {in_words(timeout_in)}")
    lines += ["", f"Decide it in the inbox: {link}"]
    if inbox:
        lines.append(f"Every approval waiting for you: {inbox}")
    lines.append("")
    return " ".join(title.split())[:255], "\n".join(lines)
