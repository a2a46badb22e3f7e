"""``manage.py shop_history --runs 3000 --days 7``: a realistic past for the dashboard."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from example_project.shop.history import generate


class Command(BaseCommand):
    help = "Write a realistic history of order runs (finished, reattempted, paused, timed out) for the dashboard."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=3000)
        parser.add_argument("--days", type=int, default=7)
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, runs: int, days: int, seed: int | None, **options: Any) -> None:
        if runs < 1 or days < 1:
            self.stderr.write("--runs and --days must be positive whole numbers")
            raise SystemExit(2)
        started = time.monotonic()
        written = generate(runs, days=days, seed=seed)
        self.stdout.write(f"wrote {written} runs over the last {days} days in {time.monotonic() - started:.1f}s")
