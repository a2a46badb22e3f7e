"""Bearer tokens for the MCP endpoint: made by an admin for a user, stored as a SHA-256
digest (the secret is shown once), revocable, with the time each was last used.

SHA-256 without a salt is enough here: the secret is 256 random bits, so there is nothing
to guess, and a digest lookup stays one indexed query per request.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from pgflow.models import AccessToken

PREFIX = "pgflow_"
TOUCH_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often per token


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def issue(user: Any, name: str, *, at: datetime | None = None) -> tuple[AccessToken, str]:
    """A new token for ``user``; returns it and its secret (the only time the secret exists)."""
    secret = new_secret()
    token = AccessToken.objects.create(
        user=user, name=name, digest=digest(secret), prefix=secret[:12], created_at=at or timezone.now()
    )
    return token, secret


def authenticate(secret: str, *, at: datetime | None = None) -> AccessToken | None:
    """The live token with this secret whose user is active, or None (nothing says which part failed)."""
    if not secret.startswith(PREFIX):
        return None
    token = AccessToken.objects.select_related("user").filter(digest=digest(secret), revoked_at__isnull=True).first()
    if token is None or not token.user.is_active:
        return None
    at = at or timezone.now()
    if token.last_used_at is None or at - token.last_used_at >= TOUCH_EVERY:
        AccessToken.objects.filter(pk=token.pk).update(last_used_at=at)
        token.last_used_at = at
    return token
