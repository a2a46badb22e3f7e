"""The MCP endpoint's bearer tokens: made here for a user, the secret shown once, revoked
here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from pgflow.models import AccessToken

from ..mcp.tokens import digest, new_secret


@admin.register(AccessToken)
class AccessTokenAdmin(admin.ModelAdmin):
    """Bearer tokens for the MCP endpoint. Creating one shows its secret once (only a digest
    is kept); "revoke" stops it at once and keeps the row, with its last use, for the record."""

    class Media:  # the dashboard's styles: tables that fit a phone, long values that wrap
        css = {"all": ("pgflow_dashboard/style.css",)}
        js = ("pgflow_dashboard/times.js",)  # moments in the viewer's own zone

    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "user__username")
    fields = ("user", "name")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)
    autocomplete_fields = ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("user", "name") if obj is None else ("user", "name", *self.readonly_fields)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # A token acts with its user's permissions: anyone but a superuser makes one only for
        # themselves, or the add permission alone would let a staff user act as a superuser.
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = get_user_model()._default_manager.filter(pk=request.user.pk or 0)
            kwargs["initial"] = request.user.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is None else ("user", "name", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return  # nothing of a token is edited after it is made
        if obj.user_id != request.user.pk and not request.user.is_superuser:  # as the form's choices
            raise PermissionError("only a superuser makes a token for another user")
        secret = new_secret()
        obj.digest, obj.prefix, obj.created_at = digest(secret), secret[:12], timezone.now()
        obj.save()
        request._pgflow_token_secret = secret  # type: ignore[attr-defined]  # shown once by response_add

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: str | None = None) -> HttpResponse:
        # Rendered straight into this response: the secret never goes through the message
        # storage (a cookie or the session) and cannot be shown again.
        context = {
            **self.admin_site.each_context(request),
            "title": "Token created",
            "opts": self.opts,
            "token": obj,
            "secret": getattr(request, "_pgflow_token_secret", ""),
            "list_url": reverse(f"{self.admin_site.name}:pgflow_accesstoken_changelist"),
        }
        return TemplateResponse(request, "admin/pgflow_dashboard/token_created.html", context)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        messages.success(request, f"{count} token{'s' if count != 1 else ''} revoked.")
