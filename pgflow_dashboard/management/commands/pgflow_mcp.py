"""``manage.py pgflow_mcp --user NAME``: pgflow's MCP server over stdio, acting as that user."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Serve pgflow's MCP tools over stdio (for an MCP client that launches this command)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user", required=True, help="the username whose permissions apply and who is named in the audit trail"
        )

    def handle(self, *args: Any, user: str, **options: Any) -> None:
        try:
            from pgflow_dashboard.mcp.server import Principal, build  # lazy: optional extra django-pgflow[mcp]
        except ImportError as exc:
            raise CommandError(f"the MCP server needs the mcp extra: pip install 'django-pgflow[mcp]' ({exc})") from exc
        model = get_user_model()
        found = model.objects.filter(**{model.USERNAME_FIELD: user}).first()
        if found is None:
            raise CommandError(f"no user named {user!r}: give the username of an existing, active user")
        if not found.is_active:
            raise CommandError(f"user {user!r} is inactive: activate it in the admin or give another user")
        server = build(Principal(user_id=found.pk))
        # async_to_sync makes this thread the one thread-sensitive ORM calls run in.
        async_to_sync(server.run_stdio_async)()
