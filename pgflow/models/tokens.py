"""The MCP endpoint's bearer tokens, written only by ``pgflow_dashboard``:
``pgflow_dashboard.mcp.tokens`` issues them (from the admin) and records their use, and
the admin revokes them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AccessToken(models.Model):
    """A bearer token for the MCP endpoint, acting as ``user``. Only a SHA-256 digest of the
    secret is stored: the secret is shown once, when an admin creates the token."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, help_text="what uses it, e.g. the agent's name")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="the secret's first characters")
    created_at = models.DateTimeField(editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "pgflow_access_token"
        verbose_name = "MCP access token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
