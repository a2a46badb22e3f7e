"""``manage.py pgflow_archive restore RUN_ID [--day YYYY-MM-DD]``: bring a run that retention
archived (``PGFLOW["ARCHIVE"]``) back into the database as the ended run it was."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pgflow import archive
from pgflow.core import archiving
from pgflow.store.restoring import AlreadyThere, restore


class Command(BaseCommand):
    help = "Restore an archived run (PGFLOW['ARCHIVE']) into the database, as the finished or cancelled run it was."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        restoring = sub.add_parser("restore", help="bring one archived run back")
        restoring.add_argument("run_id", type=int, help="the run's id, as the Archived runs page shows it")
        restoring.add_argument("--day", help="the day it ended (YYYY-MM-DD): only that day's files are read")

    def handle(self, *args: Any, **options: Any) -> None:
        configured = archive.configured()
        if configured is None:
            raise CommandError("no archive is configured: set PGFLOW['ARCHIVE'] (see docs/reference.md, The archive)")
        day = options.get("day")
        if day is not None and archiving.parse_day(day) is None:
            raise CommandError(f"--day must be a date written YYYY-MM-DD, got {day!r}")
        record = archive.find(configured, options["run_id"], day)
        if record is None:
            raise CommandError(f"run {options['run_id']} is not in the archive{f' of {day}' if day else ''}")
        try:
            run = restore(record)
        except AlreadyThere as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"restored run {run.pk} ({run.workflow_name}, {run.status}) from the archive of {record['day']}: "
            f"{len(record['steps'])} attempts, {len(record['events'])} events"
        )
