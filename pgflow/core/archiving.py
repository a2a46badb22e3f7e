"""The archive's shape: ``PGFLOW["ARCHIVE"]`` checked with messages naming what is accepted,
the file a day's runs go to, and what a line of it holds. Pure: no Django, no storage.

An archive file is gzip-compressed JSON Lines, one run a line (its row, attempts, events,
signals and batches), under ``<PREFIX><YYYY-MM-DD>/``: the day its run ended (UTC). Storage
backends cannot append, so each purge batch writes a file of its own per day, named by the
batch's first and last run ids (``runs-<first>-<last>-<token>.jsonl.gz``): a run is found by
id from the names alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

KEEP = ("all", "failed")  # every run, or only the cancelled ones and those with a failed attempt
DEFAULTS: dict[str, Any] = {"STORAGE": "default", "PREFIX": "pgflow-archive/", "KEEP": "all"}
_NAME = re.compile(r"^runs-(\d+)-(\d+)-[0-9a-f]+\.jsonl\.gz$")
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
