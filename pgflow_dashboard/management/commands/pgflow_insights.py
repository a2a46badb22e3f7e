"""``manage.py pgflow_insights [--window 24h] [--tenant KEY] [--json]``: the insights page on
the command line; ``--tenant`` counts one tenant's runs, as the page's tenant filter does."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from pgflow import readdb, tenants
from pgflow.conf import pgflow_settings
from pgflow.core.phases import ROLLED
from pgflow.models import Schedule, WorkflowRun

from ... import insights
from ...admin.tenants import tenant_keys  # the run list filter's choices (the admin is loaded by now)
from ...timeformat import duration
from ...window import WorkflowWindow


class Command(BaseCommand):
    help = "Print the workflow insights of a window: runs, failures, per class and step figures, errors, stuck runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--window",
            default=WorkflowWindow.DEFAULT,
            help=f"one of {', '.join(WorkflowWindow.CHOICES)} (default {WorkflowWindow.DEFAULT})",
        )
        parser.add_argument(
            "--tenant",
            help="count only this tenant's runs (run.tenant), as the insights page's tenant filter does",
        )
        parser.add_argument("--json", action="store_true", dest="as_json", help="print one JSON document, for machines")

    def handle(self, *args: Any, window: str, tenant: str | None, as_json: bool, **options: Any) -> None:
        try:
            parsed = WorkflowWindow.parse(window, retention=pgflow_settings.RETENTION, now=timezone.now())
        except WorkflowWindow.Invalid as exc:
            raise CommandError(str(exc)) from None
        figures = insights.compute(parsed, tenants=None if tenant is None else (known(tenant),))
        if as_json:
            self.stdout.write(json.dumps(figures, cls=DjangoJSONEncoder, indent=2))
        else:
            self.stdout.write("\n".join(report(figures)))


def known(tenant: str) -> str:
    """``tenant`` if it is a tenant key that a run or a schedule has, else a CommandError
    naming what is wrong (a typo would print a tenant's figures as all zero)."""
    try:
        tenants.checked(tenant, "--tenant")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    alias = readdb.alias()
    if WorkflowRun.objects.using(alias).filter(tenant=tenant).exists():
        return tenant
    if Schedule.objects.using(alias).filter(tenant=tenant).exists():
        return tenant  # its runs are still to come: zero is the right count
    listed = ", ".join(tenant_keys()) or "none"
    raise CommandError(f"unknown tenant {tenant!r}: no run or schedule has it (the tenants of runs: {listed})")


def report(figures: dict[str, Any]) -> list[str]:
    """The figures as lines of plain text."""
    window = figures["window"]
    counted = f", tenant {', '.join(figures['tenants'])}" if "tenants" in figures else ""
    lines = [
        f"pgflow insights: window {window['name']}{counted} ({window['since']:%Y-%m-%d %H:%M} to "
        f"{window['now']:%Y-%m-%d %H:%M %Z}, buckets of {duration(window['bucket_seconds'])})"
    ]
    if window["capped"]:
        lines.append(f"  capped to {duration(window['seconds'])} by PGFLOW['RETENTION']")
    runs = figures["runs_per_bucket"]
    failures = figures["step_failures_per_bucket"]
    started, finished = sum(b["started"] for b in runs), sum(b["finished"] for b in runs)
    cancelled, failed = sum(b["cancelled"] for b in runs), sum(b["failures"] for b in failures)
    lines.append(f"runs: {started} started, {finished} finished, {cancelled} cancelled; failed attempts: {failed}")
    lines.append("")
    lines.append(
        "workflows (started in the window, of those running and paused now; finished, cancelled, success "
        "and durations of the runs that ended in the window):"
    )
    for row in figures["workflows"]:
        rate = "—" if row["success_rate"] is None else f"{row['success_rate'] * 100:.1f}%"
        lines.append(
            f"  {row['workflow_class']}: {row['started']} started, {row['running']} running, "
            f"{row['paused']} paused, {row['finished']} finished, {row['cancelled']} cancelled; "
            f"success {rate}; p50 {duration(row['p50_seconds'])}, p95 {duration(row['p95_seconds'])}"
        )
    if not figures["workflows"]:
        lines.append("  none")
    lines.append("")
    lines.append("steps (attempts that ended in the window; p50/p95 of each phase):")
    for row in figures["steps"]:
        # Throttled only for a step a limit held: the other phases are printed even when empty.
        phases = ", ".join(
            f"{phase} {duration(row[f'{phase}_p50_seconds'])}/{duration(row[f'{phase}_p95_seconds'])}"
            for phase in ROLLED
            if phase != "throttled" or row["throttled_p50_seconds"] is not None
        )
        lines.append(
            f"  {row['workflow_class']}.{row['step_name']}: {row['attempts']} attempts, "
            f"{row['failures']} failed; {phases}"
        )
    if not figures["steps"]:
        lines.append("  none")
    lines.append(
        f"(p50/p95 from log-scale histograms: within {figures['percentiles']['max_relative_error']:.1%} "
        f"of the exact value)"
    )
    lines.append("")
    lines.append("top errors:")
    for row in figures["errors"]:
        lines.append(f"  {row['count']:>6}  {row['error_class'] or '(none recorded)'}")
        for member in row.get("members", ()):  # a failed fan-out: what its members raised
            message = f": {member['message']}" if member["message"] else ""
            lines.append(f"          of its members: {member['count']} × {member['error_class']}{message}")
    if not figures["errors"]:
        lines.append("  none")
    lines.append("")
    stuck = figures["stuck"]
    lines.append("stuck now:")
    for key, label in (
        ("paused", "runs paused"),
        ("overdue", "steps overdue"),
        ("lease_expired", "attempts past their lease"),
        ("deadline_passed", "waits past their deadline"),
        ("definition_changed", "open runs on a changed definition"),
    ):
        group = stuck[key]
        lines.append(f"  {label}: {group['count']}")
        for row in group["rows"][:10]:
            what = row.get("paused_reason") or row.get("step_name") or row.get("current_step") or ""
            lines.append(f"    run {row['run_id']} {row['workflow_class']}: {what}")
    return lines
