"""The archive (``PGFLOW["ARCHIVE"]``): runs that retention is about to purge, written to a
Django storage as gzip-compressed JSON Lines grouped by the day they ended, and read back
for the admin's "Archived runs" page. The shape of it: :mod:`pgflow.core.archiving`.

Retention (``pgflow.store.purge_runs``) calls :func:`write` with each batch's locked runs
before it deletes them, and deletes only the ids it returns: a run whose file could not be
written stays in the database, and the next sweep tries again.
"""

from __future__ import annotations

import gzip
import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Q

from .conf import pgflow_settings
from .core import archiving
from .core.archiving import Archive
from .models import Batch, BatchMember, Event, Signal, Step, WorkflowRun

logger = logging.getLogger("pgflow")

MAX_DAYS_SEARCHED = 31  # the archive page searches at most this many days at once


def configured() -> Archive | None:
    raw = pgflow_settings.ARCHIVE
    return None if raw is None else archiving.parse(raw)


def storage_of(archive: Archive) -> Storage:
    return storages[archive.storage]


# --- writing -----------------------------------------------------------------------------------


def write(ids: list[int]) -> set[int]:
    """Archive the runs ``ids`` (ended, locked by the purge) and return those that may be
    purged: every run archived, and those ``KEEP`` leaves out. Without an archive, all."""
    archive = configured()
    if archive is None or not ids:
        return set(ids)
    runs = list(
        WorkflowRun.objects.filter(pk__in=ids)
        .annotate(failed_attempts=Count("step", filter=Q(step__status="failed")))
        .order_by("id")
    )
    purgeable = {
        run.pk for run in runs if not archiving.kept(archive, status=run.status, failed_attempts=run.failed_attempts)
    }
    purgeable |= set(ids) - {run.pk for run in runs}  # gone meanwhile: nothing to keep
    by_day: dict[str, list[WorkflowRun]] = defaultdict(list)
    for run in runs:
        if run.pk not in purgeable and run.finished_at is not None:
            by_day[archiving.day_of(run.finished_at)].append(run)
    storage = storage_of(archive)
    for day, kept in sorted(by_day.items()):
        name = archiving.file_name(archive, day, kept[0].pk, kept[-1].pk, secrets.token_hex(4))
        try:
            body = gzip.compress("".join(line + "\n" for line in _lines(kept)).encode(), mtime=0)
            storage.save(name, ContentFile(body))
        except Exception:  # any storage error: these runs stay in the database, retried by the next sweep
            logger.exception(
                "the archive could not write %s runs of %s to %s: they are not purged", len(kept), day, name
            )
            continue
        purgeable |= {run.pk for run in kept}
    return purgeable


def _lines(runs: list[WorkflowRun]) -> Iterator[str]:
    ids = [run.pk for run in runs]
    steps = _by("run_id", Step.objects.filter(run_id__in=ids).order_by("created_at", "id").values())
    events = _by("run_id", Event.objects.filter(run_id__in=ids).order_by("created_at", "id").values())
    signals = _by("run_id", Signal.objects.filter(run_id__in=ids).order_by("id").values())
    members = _by("batch_id", BatchMember.objects.filter(batch__run_id__in=ids).order_by("position").values())
    batches = _by(
        "run_id",
        ({**row, "members": members.get(row["id"], [])} for row in Batch.objects.filter(run_id__in=ids).values()),
    )
    columns = [field.attname for field in WorkflowRun._meta.concrete_fields]
    for run in WorkflowRun.objects.filter(pk__in=ids).order_by("id").values(*columns):
        record = {
            "run": run,
            "steps": steps.get(run["id"], []),
            "events": events.get(run["id"], []),
            "signals": signals.get(run["id"], []),
            "batches": batches.get(run["id"], []),
        }
        yield json.dumps(record, cls=DjangoJSONEncoder, separators=(",", ":"))


def _by(column: str, rows: Iterable[Mapping[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    grouped: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row[column]].append(dict(row))
    return grouped


# --- reading -----------------------------------------------------------------------------------


def days(archive: Archive) -> list[str]:
    """The days the archive holds runs of, newest first."""
    folder = archive.prefix.rstrip("/")
    try:
        found, _files = storage_of(archive).listdir(folder)
    except FileNotFoundError:
        return []
    return sorted((day for day in found if archiving.is_day(day)), reverse=True)


def _files(archive: Archive, day: str) -> list[str]:
    try:
        _dirs, names = storage_of(archive).listdir(f"{archive.prefix}{day}")
    except FileNotFoundError:
        return []
    return sorted(f"{archive.prefix}{day}/{name}" for name in names if archiving.ids_of(name))


def _read(archive: Archive, name: str) -> Iterator[dict[str, Any]]:
    with storage_of(archive).open(name, "rb") as handle:
        text = gzip.decompress(handle.read()).decode()
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def search(
    archive: Archive,
    *,
    days_: list[str],
    key: str = "",
    workflow: str = "",
    attributes: dict[str, Any] | None = None,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """The archived runs of ``days_`` matching every filter given (a key exactly, a class by
    name or dotted path, attributes by value), newest first, at most ``limit``."""
    found: list[dict[str, Any]] = []
    seen: set[int] = set()  # a batch written twice (its purge rolled back after the write) shows once
    for day in days_[:MAX_DAYS_SEARCHED]:
        for name in reversed(_files(archive, day)):
            for record in _read(archive, name):
                run = record["run"]
                if key and run.get("key") != key:
                    continue
                path = run.get("workflow_class") or ""
                if workflow and workflow not in (path, path.rsplit(".", 1)[-1]):
                    continue
                if attributes and any(
                    (run.get("attributes") or {}).get(k, _MISSING) != v for k, v in attributes.items()
                ):
                    continue
                if run["id"] in seen:
                    continue
                seen.add(run["id"])
                found.append({**record, "day": day})
    found.sort(key=lambda record: record["run"]["id"], reverse=True)
    return found[:limit]


_MISSING = object()


def find(archive: Archive, run_id: int, day: str | None = None) -> dict[str, Any] | None:
    """The archived record of run ``run_id`` (its day narrows the files read), or None."""
    for each in [day] if day else days(archive):
        for name in _files(archive, each):
            first, last = archiving.ids_of(name) or (0, -1)
            if not first <= run_id <= last:
                continue
            for record in _read(archive, name):
                if record["run"]["id"] == run_id:
                    return {**record, "day": each}
    return None
