"""The Queues page: each queue's load and pause state, with Pause and Resume."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from pgflow import queues as pgflow_queues
from pgflow.core.definitions import valid_queue
from pgflow.models import QueueState

from .. import confirm, queuepage
from .workers import SeenByRunViewers


@admin.register(QueueState)
class QueueAdmin(SeenByRunViewers):
    """The Queues page: each queue's due and running attempts, live workers and pause state
    (``queuepage``), with Pause and Resume through ``pgflow.pause_queue`` / ``resume_queue``.
    Those who may view runs may view it; pausing and resuming take a change permission (on
    queues or on runs). Rows are never added or deleted here: a pause writes its own."""

    ACTIONS = {"pause": pgflow_queues.pause_queue, "resume": pgflow_queues.resume_queue}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) or request.user.has_perm("pgflow.change_workflowrun")

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        name = f"{opts.app_label}_{opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self._act(request)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Queues",
            "queues": queuepage.queues(timezone.now()),
            "can_change": self.has_change_permission(request),
            "media": self.media,
        }
        return TemplateResponse(request, "admin/pgflow_dashboard/queues.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        action, queue = request.POST.get("action", ""), request.POST.get("queue", "").strip()
        act = self.ACTIONS.get(action)
        if act is None:
            return HttpResponse(
                f"action must be one of {', '.join(sorted(self.ACTIONS))}, got {action!r}",
                status=400,
                content_type="text/plain",
            )
        form = confirm.posted(request.POST)
        if valid_queue(queue) and form.needs_page:
            # Pausing stops every worker claiming the queue, resuming lets them all claim what
            # piled up at once: say what it holds first.
            row = next((row for row in queuepage.queues(timezone.now()) if row["queue"] == queue), None)
            return confirm.page(
                request,
                self.admin_site,
                "admin/pgflow_dashboard/queue_confirm.html",
                form,
                title=f"{action.capitalize()} queue {queue!r}?",
                action=action,
                opts=self.model._meta,
                queue=queue,
                row=row,
                media=self.media,
            )
        try:
            act(queue, actor=form.actor(request.user))
        except ValueError as exc:
            self.message_user(request, f"Nothing changed: {exc}.", messages.ERROR)
        else:
            self.message_user(request, f"Queue {queue!r} {action}d.", messages.SUCCESS)
        return redirect(request.path)
