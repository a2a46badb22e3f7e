"""The admin's Workers page (read-only) and the MCP token admin (secret shown once, revocable)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from pgflow.models import AccessToken
from pgflow.runtime import presence
from pgflow_dashboard.mcp import tokens

pytestmark = pytest.mark.django_db


def _staff(name: str, *perms: str) -> User:
    user = User.objects.create_user(name, password="x", is_staff=True)  # noqa: S106
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="pgflow", codename__in=perms))
    return user


def test_workers_page_lists_live_and_gone_workers_read_only(client):
    now = timezone.now()
    presence.register(name="w-live", queues=["workflows", "mail"], concurrency=4, at=now)
    presence.register(name="w-gone", queues=["slow"], concurrency=1, at=now - timedelta(hours=2))
    client.force_login(_staff("viewer", "view_workflowrun"))
    page = client.get("/admin/pgflow/worker/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "w-live" in html and "w-gone" in html and "workflows, mail" in html
    assert html.count('alt="True"') == 1 and html.count('alt="False"') == 1
    assert client.get("/admin/pgflow/worker/add/").status_code == 403
    client.force_login(_staff("stranger"))
    assert client.get("/admin/pgflow/worker/").status_code == 403


def test_a_token_is_shown_once_stored_hashed_and_revocable(client):
    admin = User.objects.create_superuser("root", password="x")  # noqa: S106
    ops = _staff("ops", "view_workflowrun")
    client.force_login(admin)
    page = client.post("/admin/pgflow/accesstoken/add/", {"user": ops.pk, "name": "claude"})
    assert page.status_code == 200
    token = AccessToken.objects.get()
    secret = page.context["secret"]
    assert secret.startswith("pgflow_") and secret in page.content.decode()
    assert token.digest == tokens.digest(secret) and secret not in (token.digest, token.prefix)
    assert secret not in client.get(f"/admin/pgflow/accesstoken/{token.pk}/change/").content.decode()
    assert tokens.authenticate(secret).user == ops
    client.post("/admin/pgflow/accesstoken/", {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert tokens.authenticate(secret) is None
