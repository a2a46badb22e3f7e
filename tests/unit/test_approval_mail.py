"""PGFLOW["APPROVAL_EMAIL"] checked, and the mail an opened approval sends (pgflow.core.approvalmail)."""

from __future__ import annotations

import pytest

from pgflow.core import approvalmail

MAIL = approvalmail.parse({"BASE_URL": "https://ops.example.com/"})


def test_none_is_off_and_a_base_url_is_enough():
    assert approvalmail.problems(None) == []
    assert approvalmail.problems({"BASE_URL": "https://ops.example.com"}) == []
    assert MAIL == approvalmail.MailSettings(
        base_url="https://ops.example.com", from_email=None, subject_prefix="[pgflow] "
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (True, "must be None (no email) or a dict such as {'BASE_URL': 'https://ops.example.com'}, got bool"),
        ({}, "['BASE_URL'] must be the site's address the mail links to, starting with https:// or http://"),
        ({"BASE_URL": "ops.example.com"}, "got 'ops.example.com'"),
        (
            {"BASE_URL": "https://x.org", "ENABLED": True},
            "unknown key 'ENABLED' in PGFLOW['APPROVAL_EMAIL'] (accepted: BASE_URL, FROM_EMAIL, SUBJECT_PREFIX)",
        ),
        ({"BASE_URL": "https://x.org", "FROM_EMAIL": "ops"}, "or an address such as 'pgflow@example.com'"),
        ({"BASE_URL": "https://x.org", "SUBJECT_PREFIX": "a\nb"}, "['SUBJECT_PREFIX'] must be a one-line string"),
    ],
)
def test_a_bad_value_is_named_with_what_is_accepted(raw, expected):
    (problem,) = approvalmail.problems(raw)
    assert expected in problem


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (2 * 86_400 - 0.01, "2 days"),
        (86_400 + 3 * 3_600, "1 day 3 hours"),
        (86_400 + 4 * 60, "1 day"),
        (3_600, "1 hour"),
        (90, "2 minutes"),
        (0, "less than a minute"),
        (-5, "less than a minute"),
    ],
)
def test_the_time_left_in_words(seconds, words):
    assert approvalmail.in_words(seconds) == words


def test_the_mail_names_the_workflow_run_step_subject_timeout_and_the_link():
    title, body = approvalmail.compose(
        MAIL,
        workflow="Refund",
        run_id=42,
        step="review",
        subject="Order #7",
        quorum=2,
        timeout_in=2 * 86_400,
        link="https://ops.example.com/admin/pgflow/inbox/42/review/",
        inbox="https://ops.example.com/admin/pgflow/inbox/",
    )
    assert title == "[pgflow] Approval waiting: review of Refund #42 (Order #7)"
    assert "Workflow: Refund\nRun: #42\nStep: review\nSubject: Order #7\nApprovals needed: 2\n" in body
    assert "Timeout: in 2 days" in body
    assert "Decide it in the inbox: https://ops.example.com/admin/pgflow/inbox/42/review/\n" in body
    assert "Every approval waiting for you: https://ops.example.com/admin/pgflow/inbox/\n" in body


def test_without_a_timeout_or_subject_the_mail_says_so_and_a_subject_line_stays_one_line():
    title, body = approvalmail.compose(
        MAIL, workflow="W", run_id=1, step="s", subject="two\nlines", quorum=1, timeout_in=None, link="x"
    )
    assert "\n" not in title and title.endswith("(two lines)")
    assert "Timeout: none, it waits until someone decides" in body
    _, body = approvalmail.compose(
        MAIL, workflow="W", run_id=1, step="s", subject="", quorum=1, timeout_in=None, link="x"
    )
    assert "Subject:" not in body
