"""The archive's shape: ``PGFLOW["ARCHIVE"]`` checked with messages naming what is accepted,
the file a day's runs go to, and what a line of it holds. Pure: no Django, no storage.

An archive file is gzip-compressed JSON Lines, one run a line (its row, attempts, events,
signals and batches), under ``<PREFIX><YYYY-MM-DD>/``: the day its run ended (UTC). Storage
backends cannot append, so each purge batch writes a file of its own per day, named by the
batch's first and last run ids and a digest of all of them
(``runs-<first>-<last>-<digest>.jsonl.gz``): a batch archived again, because its purge rolled
back after the write, writes over its own file. Beside each file, its index
(``runs-<first>-<last>-<digest>.index.json.gz``, JSON Lines): one :func:`entry` per run, what
the Archived runs page searches, so a search reads no run's file and opening a run reads only
its own. A run held by two files (a batch that lost a run to a lock between its tries, a
restored run archived again) counts once, its newest copy (:func:`newest`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

KEEP = ("all", "failed")  # every run, or only the cancelled ones and those with a failed attempt
DEFAULTS: dict[str, Any] = {"STORAGE": "default", "PREFIX": "pgflow-archive/", "KEEP": "all"}
_NAME = re.compile(r"^runs-(\d+)-(\d+)-[0-9a-f]+\.jsonl\.gz$")
DATA_SUFFIX = ".jsonl.gz"
INDEX_SUFFIX = ".index.json.gz"
INDEXED = ("id", "key", "workflow_class", "attributes", "status", "finished_at")  # a run's columns an index holds
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Archive:
    storage: str  # an alias of Django's STORAGES
    prefix: str
    keep: str


def problems(raw: Any) -> list[str]:
    """Every problem with a ``PGFLOW["ARCHIVE"]`` value (None: no archive)."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [f"PGFLOW['ARCHIVE'] must be a dict such as {DEFAULTS!r} or None, got {type(raw).__name__}"]
    found = [
        f"unknown key {key!r} in PGFLOW['ARCHIVE'] (accepted: {', '.join(DEFAULTS)})"
        for key in raw
        if key not in DEFAULTS
    ]
    for key in ("STORAGE", "PREFIX"):
        if key in raw and not (isinstance(raw[key], str) and (raw[key] or key == "PREFIX")):
            found.append(f"PGFLOW['ARCHIVE'][{key!r}] must be a string, got {raw[key]!r}")
    if raw.get("KEEP", "all") not in KEEP:
        found.append(f"PGFLOW['ARCHIVE']['KEEP'] must be one of {', '.join(KEEP)}, got {raw['KEEP']!r}")
    return found


def parse(raw: dict[str, Any]) -> Archive:
    values = {**DEFAULTS, **raw}
    prefix = values["PREFIX"]
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return Archive(storage=values["STORAGE"], prefix=prefix, keep=values["KEEP"])


def day_of(finished_at: datetime) -> str:
    return finished_at.astimezone(UTC).date().isoformat()


def file_name(archive: Archive, day: str, first: int, last: int, token: str) -> str:
    return f"{archive.prefix}{day}/runs-{first}-{last}-{token}.jsonl.gz"


def batch_file_name(archive: Archive, day: str, ids: Iterable[int]) -> str:
    """The file a batch's runs of ``day`` go to: the same ids, the same name."""
    ordered = sorted(set(ids))
    digest = hashlib.sha256(",".join(map(str, ordered)).encode()).hexdigest()[:16]
    return file_name(archive, day, ordered[0], ordered[-1], digest)


def index_name(name: str) -> str:
    """The index written beside the archive file ``name``."""
    return name.removesuffix(DATA_SUFFIX) + INDEX_SUFFIX


def entry(run: Mapping[str, Any], *, name: str, archived_at: str | None) -> dict[str, Any]:
    """A run's line in an index: its searched columns (``run`` as an archive line holds it, its
    date-times ISO text), the file holding it and when that was written (None: not known)."""
    return {**{column: run.get(column) for column in INDEXED}, "object": name, "archived_at": archived_at}


def newest(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` with each run once: the copy written last (by ``archived_at``, then the end
    it records, then the file's name), in the order first seen."""
    kept: dict[int, dict[str, Any]] = {}
    for each in entries:
        held = kept.get(each["id"])
        if held is None or _age(each) > _age(held):
            kept[each["id"]] = dict(each)
    return list(kept.values())


def _age(each: Mapping[str, Any]) -> tuple[str, str, str]:
    return (each.get("archived_at") or "", each.get("finished_at") or "", each.get("object") or "")


def ids_of(name: str) -> tuple[int, int] | None:
    """The first and last run id a file's name says it holds, or None for another file."""
    match = _NAME.match(name.rsplit("/", 1)[-1])
    return (int(match.group(1)), int(match.group(2))) if match else None


def is_day(name: str) -> bool:
    return bool(_DAY.match(name))


def parse_day(text: str) -> date | None:
    try:
        return date.fromisoformat(text) if is_day(text) else None
    except ValueError:
        return None


def kept(archive: Archive, *, status: str, failed_attempts: int) -> bool:
    """Whether a run being purged goes to the archive."""
    return archive.keep == "all" or status == "cancelled" or failed_attempts > 0
