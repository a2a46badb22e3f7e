"""``manage.py pgflow_archive restore RUN_ID [--day YYYY-MM-DD]``: bring a run that retention
archived (``PGFLOW["ARCHIVE"]``) back into the database as the ended run it was."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import NoReverseMatch, reverse

from pgflow import archive
from pgflow.core import archiving
from pgflow.models import WorkflowRun
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
        run_id = options["run_id"]
        live = WorkflowRun.objects.filter(pk=run_id).first()
        if live is not None:
            raise CommandError(
                f"run {run_id} is live in the database ({live.workflow_name}, {live.status}): nothing to restore"
                + _opens_at(run_id)
            )
        record = archive.find(configured, run_id, day)
        if record is None:
            raise CommandError(f"run {run_id} is not in the archive: {_where(configured, day)}")
        try:
            run = restore(record)
        except AlreadyThere as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"restored run {run.pk} ({run.workflow_name}, {run.status}) from the archive of {record['day']}: "
            f"{len(record['steps'])} attempts, {len(record['events'])} events"
        )


def _where(configured: archiving.Archive, day: str | None) -> str:
    """Where the archive looked for a run, for the message that it is not there."""
    held = archive.days(configured)
    place = f"looked in the storage {configured.storage!r} under {configured.prefix!r}"
    count = f"{len(held)} day{'s' if len(held) != 1 else ''}"
    if day:
        return f"{place}, the day {day} (it holds {count}; leave out --day to look in all)"
    if not held:
        return f"{place}, which holds no day yet"
    return f"{place}, {count} ({held[-1]} to {held[0]})"


def _opens_at(run_id: int) -> str:
    try:
        return f"; it opens at {reverse('admin:pgflow_workflowrun_change', args=[run_id])}"
    except NoReverseMatch:  # a project without the admin's pages
        return ""
