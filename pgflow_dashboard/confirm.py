"""What every dangerous action shares: a confirmation page, and the optional reason an
operator types on it, carried into the audit trail in the actor (``"user:ada (reason: …)"``,
the same column an agent's ``"agent:x for user:y"`` uses), since the run controls and
``pause_queue`` record who acted, not why.

An action reads what was posted once (:func:`posted`): the reason, why it was refused, and
whether the page was confirmed. Until it is confirmed with a reason that can be recorded,
the action answers with its confirmation page (:func:`page`: the admin's context, the
reason as typed and its error, a 400 when the reason was refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.admin import AdminSite
from django.http import HttpRequest, QueryDict
from django.template.response import TemplateResponse

from pgflow.core import jsonvalue
from pgflow.core.events import with_reason

REASON_LIMIT = 120  # characters: with "user:<name> (reason: …)" it fits the actor column


class BadReason(ValueError):
    """The reason typed cannot be recorded; the message says what is accepted."""


def reason_of(posted: str | None) -> str:
    """The reason posted with a confirmation, stripped; refused when too long or unstorable."""
    reason = " ".join((posted or "").split())
    if len(reason) > REASON_LIMIT:
        raise BadReason(f"the reason has {len(reason)} characters; at most {REASON_LIMIT} are recorded")
    if reason and jsonvalue.text_problem(reason):
        raise BadReason("the reason holds a character PostgreSQL cannot store (a NUL or a lone surrogate)")
    return reason


def actor(user: Any, reason: str) -> Any:
    """The actor to hand the control: the user, with the reason when one was given."""
    return with_reason(user, reason) if reason else user


@dataclass(frozen=True)
class Posted:
    """What a dangerous action's form posted: ``reason`` (cleaned, or as typed when it was
    refused), ``error`` (why the reason was refused, or None) and ``confirmed``."""

    reason: str
    error: str | None
    confirmed: bool

    @property
    def needs_page(self) -> bool:
        """Not confirmed yet, or confirmed with a reason that cannot be recorded."""
        return not self.confirmed or self.error is not None

    def actor(self, user: Any) -> Any:
        """The actor to hand the control: the user, with the reason (a refused one is dropped)."""
        return actor(user, "" if self.error else self.reason)


def posted(data: QueryDict) -> Posted:
    try:
        return Posted(reason_of(data.get("reason")), None, data.get("confirm") == "yes")
    except BadReason as exc:
        return Posted(data.get("reason", ""), str(exc), data.get("confirm") == "yes")


def page(
    request: HttpRequest,
    site: AdminSite,
    template: str,
    form: Posted,
    *,
    title: str,
    opts: Any,
    **context: Any,
) -> TemplateResponse:
    """The confirmation page: the admin's context, ``title`` and ``opts``, the reason with
    its error and limit, and the action's own ``context``; a 400 when the reason was refused."""
    request.current_app = site.name
    shared = {
        **site.each_context(request),
        "title": title,
        "opts": opts,
        "reason": form.reason,
        "reason_error": form.error,
        "reason_limit": REASON_LIMIT,
    }
    return TemplateResponse(request, template, {**shared, **context}, status=400 if form.error else 200)
