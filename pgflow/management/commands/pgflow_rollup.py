"""``manage.py pgflow_rollup [--rebuild] [--days N]``: bring the insights' hourly rollup up to date."""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from pgflow import rollup
from pgflow.conf import pgflow_settings


def days(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number of days, got {value!r}")
    return number


class Command(BaseCommand):
    help = (
        "Roll every closed hour the sweep has not rolled yet into the insights' rollup; with --rebuild, "
        "count the rolled hours again first (after rows were written into the past)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild", action="store_true", help="count again the hours already rolled (of the last --days days)"
        )
        parser.add_argument(
            "--days",
            type=days,
            default=None,
            help="with --rebuild: how many days back (default: RETENTION, or all when it is None)",
        )

    def handle(self, *args: Any, rebuild: bool, days: int | None, **options: Any) -> None:
        if days is not None and not rebuild:
            raise CommandError("--days goes with --rebuild")
        now = timezone.now()
        started = time.monotonic()
        if rebuild:
            retention = pgflow_settings.RETENTION
            if days is not None:
                since = now - timedelta(days=days)
            elif retention is not None:
                since = now - (retention if isinstance(retention, timedelta) else timedelta(seconds=retention))
            else:
                since = rollup.first_activity() or now
            counted = rollup.rebuild(since, now)
            self.stdout.write(f"counted {counted} rolled hours again since {since:%Y-%m-%d %H:%M %Z}")
        rolled = rollup.roll(at=now, limit=None)
        mark = rollup.rolled_until()
        until = "nothing rolled (no rows)" if mark is None else f"every hour before {mark:%Y-%m-%d %H:%M %Z} is rolled"
        self.stdout.write(f"rolled {rolled} hours in {time.monotonic() - started:.1f}s; {until}")
