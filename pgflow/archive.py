"""The archive (``PGFLOW["ARCHIVE"]``): runs that retention is about to purge, written to a
Django storage as gzip-compressed JSON Lines grouped by the day they ended, and read back
for the admin's "Archived runs" page. The shape of it: :mod:`pgflow.core.archiving`.

Retention (``pgflow.store.purge_runs``) calls :func:`write` with each batch's locked runs
before it deletes them, and deletes only the ids it returns: a run whose file or index could
not be written stays in the database, and the next sweep tries again. A batch written and then
not purged (its transaction rolled back) is written again under the same name, over itself.
Searching reads only the indexes; opening a run reads the indexes and then its one file.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Q
from django.utils import timezone

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
    archived_at = json.loads(json.dumps(timezone.now(), cls=DjangoJSONEncoder))  # as the lines write moments
    for day, kept in sorted(by_day.items()):
        name = archiving.batch_file_name(archive, day, [run.pk for run in kept])
        try:
            records = list(_records(kept, archived_at))
            _put(storage, name, records)
            try:
                _put(storage, archiving.index_name(name), [_entry(record, name) for record in records])
            except Exception:
                storage.delete(name)  # a file no index names would be found by no search: taken back
                raise
        except Exception:  # any storage error: these runs stay in the database, retried by the next sweep
            logger.exception(
                "the archive could not write %s runs of %s to %s: they are not purged", len(kept), day, name
            )
            continue
        purgeable |= {run.pk for run in kept}
        _drop_superseded(archive, name, {run.pk for run in kept})
    return purgeable


def _put(storage: Storage, name: str, lines: list[dict[str, Any]]) -> None:
    """Write ``lines`` as gzip JSON Lines to ``name``, over what is there: a batch written again."""
    body = gzip.compress(
        "".join(json.dumps(line, cls=DjangoJSONEncoder, separators=(",", ":")) + "\n" for line in lines).encode(),
        mtime=0,
    )
    if storage.exists(name):
        storage.delete(name)  # storages keep both by renaming the new one; this name must hold it
    saved = storage.save(name, ContentFile(body))
    if saved != name:  # another writer took the name meanwhile: this one is not where it is looked for
        storage.delete(saved)
        raise OSError(f"the storage saved {name} as {saved}")


def _entry(record: dict[str, Any], name: str) -> dict[str, Any]:
    return archiving.entry(record["run"], name=name, archived_at=record.get("archived_at"))


def _drop_superseded(archive: Archive, name: str, ids: set[int]) -> None:
    """Delete the other files of ``name``'s day whose runs it all holds again (a batch whose
    purge rolled back, archived again with more runs): the archive keeps each run once. Only
    files whose names' range lies within this batch's are read, and only their indexes."""
    storage = storage_of(archive)
    first, last = min(ids), max(ids)
    folder = name.rsplit("/", 1)[0]
    for other in _files_in(storage, folder):
        span = archiving.ids_of(other)
        if other == name or span is None or not (first <= span[0] and span[1] <= last):
            continue
        try:
            held = {each["id"] for each in _read(archive, archiving.index_name(other))}
            if held <= ids:
                storage.delete(archiving.index_name(other))
                storage.delete(other)
        except Exception:  # no index (written before indexes), unreadable: kept; the reader shows each run once
            logger.info("the archive kept %s beside %s", other, name, exc_info=True)


def _records(runs: list[WorkflowRun], archived_at: str) -> Iterator[dict[str, Any]]:
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
        # Through JSON once, so the index entry holds the moments as the line does (ISO text).
        yield json.loads(
            json.dumps(
                {
                    "run": run,
                    "steps": steps.get(run["id"], []),
                    "events": events.get(run["id"], []),
                    "signals": signals.get(run["id"], []),
                    "batches": batches.get(run["id"], []),
                    "archived_at": archived_at,
                },
                cls=DjangoJSONEncoder,
            )
        )


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


def _files_in(storage: Storage, folder: str) -> list[str]:
    """The archive files (not their indexes) in ``folder``, by name."""
    try:
        _dirs, names = storage.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(f"{folder}/{name}" for name in names if archiving.ids_of(name))


def _read(archive: Archive, name: str) -> Iterator[dict[str, Any]]:
    with storage_of(archive).open(name, "rb") as handle:
        text = gzip.decompress(handle.read()).decode()
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def entries(archive: Archive, day: str, run_id: int | None = None) -> list[dict[str, Any]]:
    """The index entries of ``day``'s runs (:func:`pgflow.core.archiving.entry`), each with its
    ``day``; with ``run_id``, only of the files whose names' range holds it. A file written
    before indexes were (none beside it) is read whole instead."""
    storage = storage_of(archive)
    folder = f"{archive.prefix}{day}"
    try:
        _dirs, names = storage.listdir(folder)
    except FileNotFoundError:
        return []
    indexes = {name for name in names if name.endswith(archiving.INDEX_SUFFIX)}
    found: list[dict[str, Any]] = []
    for name in sorted(names):
        span = archiving.ids_of(name)
        if span is None or (run_id is not None and not span[0] <= run_id <= span[1]):
            continue
        path = f"{folder}/{name}"
        if archiving.index_name(name) in indexes:
            lines = list(_read(archive, archiving.index_name(path)))
        else:
            lines = [_entry(record, path) for record in _read(archive, path)]
        found.extend({**line, "day": day} for line in lines)
    return found


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
    name or dotted path, attributes by value), newest first, at most ``limit``: each
    ``{"run": its indexed columns, "day": ..., "object": its file}``, from the indexes alone.
    A run held twice (its purge rolled back, or restored and archived again) shows once."""
    held = archiving.newest(each for day in days_[:MAX_DAYS_SEARCHED] for each in entries(archive, day))
    found = []
    for each in held:
        if key and each.get("key") != key:
            continue
        path = each.get("workflow_class") or ""
        if workflow and workflow not in (path, path.rsplit(".", 1)[-1]):
            continue
        if attributes and any((each.get("attributes") or {}).get(k, _MISSING) != v for k, v in attributes.items()):
            continue
        found.append(
            {
                "run": {column: each[column] for column in archiving.INDEXED},
                "day": each["day"],
                "object": each["object"],
            }
        )
    found.sort(key=lambda record: record["run"]["id"], reverse=True)
    return found[:limit]


_MISSING = object()


def find(archive: Archive, run_id: int, day: str | None = None) -> dict[str, Any] | None:
    """The archived record of run ``run_id`` (its day narrows the files read), its newest copy,
    or None. Only indexes, and then the one file holding it, are read."""
    held = archiving.newest(
        each
        for day_ in ([day] if day else days(archive))
        for each in entries(archive, day_, run_id)
        if each["id"] == run_id
    )
    if not held:
        return None
    (newest,) = held
    for record in _read(archive, newest["object"]):
        if record["run"]["id"] == run_id:
            return {**record, "day": newest["day"]}
    return None
