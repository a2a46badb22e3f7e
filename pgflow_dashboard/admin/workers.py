"""The live workers page: the ``pgflow_worker`` processes, read-only, and the permission rule
the operator pages share (:class:`SeenByRunViewers`: who may view runs may view them)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from pgflow.conf import pgflow_settings
from pgflow.models import Worker


class SeenByRunViewers(admin.ModelAdmin):
    """An operator page those who may view (or change) runs may view, with its own
    permissions too."""

    class Media:  # the dashboard's styles: tables that fit a phone, long values that wrap
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return (
            super().has_view_permission(request, obj)
            or request.user.has_perm("pgflow.view_workflowrun")
            or request.user.has_perm("pgflow.change_workflowrun")
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)


@admin.register(Worker)
class WorkerAdmin(SeenByRunViewers):
    """The ``pgflow_worker`` processes, as each records itself (``pgflow.runtime.presence``).
    Read-only: a worker writes its own row. Operators who may view runs may view this."""

    list_display = (
        "name",
        "host",
        "pid",
        "queue_list",
        "concurrency",
        "version",
        "started_at",
        "heartbeat_at",
        "live",
        "steps_run",
        "steps_in_progress",
    )
    ordering = ("-heartbeat_at", "name")
    search_fields = ("name", "host")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="queues")
    def queue_list(self, worker: Worker) -> str:
        return ", ".join(worker.queues or [])

    @admin.display(description="live", boolean=True)
    def live(self, worker: Worker) -> bool:
        lease = timedelta(seconds=pgflow_settings.seconds("LEASE"))
        return worker.heartbeat_at >= timezone.now() - lease
