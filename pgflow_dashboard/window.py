"""The time window the workflow insights read: 1 h, 24 h (the default), 7 d or 30 d.

A window is never longer than ``PGFLOW["RETENTION"]``: finished and cancelled runs older
than that are purged, so a longer window would undercount. Each length has its chart
bucket, about 30 per window (5 min, 1 h, 6 h, 1 d); a window capped by retention takes the
bucket of the shortest choice that covers it. Any other name is :class:`WorkflowWindow.Invalid`,
which the insights page answers with a 400 and the command with an error.

``now`` is fixed when the window is parsed, so every query and every link of one page
share one window end. Pure: no database, no clock reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import ClassVar

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, init=False)
class WorkflowWindow:
    """One insights window: its ``name``, length in ``seconds`` and chart ``bucket_seconds``."""

    class Invalid(ValueError):
        """A window name that is not one of :data:`WorkflowWindow.CHOICES`."""

    # name -> (seconds, bucket seconds)
    CHOICES: ClassVar[MappingProxyType[str, tuple[int, int]]] = MappingProxyType(
        {
            "1h": (3_600, 300),
            "24h": (86_400, 3_600),
            "7d": (604_800, 21_600),
            "30d": (2_592_000, 86_400),
        }
    )
    DEFAULT: ClassVar[str] = "24h"

    name: str
    seconds: int  # the length read: the choice's, or RETENTION when that is shorter
    bucket_seconds: int
    capped: bool  # True when RETENTION shortened the window
    now: datetime  # the window's end

    def __init__(self, name: str, *, retention: timedelta | float | None, now: datetime) -> None:
        if not isinstance(name, str) or name not in self.CHOICES:
            raise self.Invalid(f"unknown window {name!r} (one of {', '.join(self.CHOICES)})")
        if now.tzinfo is None or now.utcoffset() is None:
            raise ValueError(f"now must be an aware datetime, got {now!r}")
        requested = self.CHOICES[name][0]
        seconds = requested
        if retention is not None:
            kept = retention.total_seconds() if isinstance(retention, timedelta) else retention
            seconds = min(requested, int(kept))
        # The shortest choice that covers the (possibly capped) length lends its bucket.
        bucket = next(bucket for length, bucket in self.CHOICES.values() if length >= seconds)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "bucket_seconds", bucket)
        object.__setattr__(self, "capped", seconds < requested)
        object.__setattr__(self, "now", now)

    @classmethod
    def parse(cls, value: str | None, *, retention: timedelta | float | None, now: datetime) -> WorkflowWindow:
        """The window named by ``value`` (a query parameter or option); ``None`` or ``""`` is 24h.

        ``retention`` is ``PGFLOW["RETENTION"]`` (``None`` keeps runs for ever); ``now`` is
        the page's fixed end of the window.
        """
        return cls(cls.DEFAULT if value is None or value == "" else value, retention=retention, now=now)

    def since(self, reference: datetime | None = None) -> datetime:
        """The window's start: ``seconds`` before ``reference`` (the window's ``now`` by default)."""
        end = self.now if reference is None else reference
        # Subtracting in UTC: across a DST change a local wall-clock day is 23 or 25 hours.
        return (end.astimezone(UTC) - timedelta(seconds=self.seconds)).astimezone(end.tzinfo)

    def to_dict(self) -> dict[str, str | int | bool]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "bucket_seconds": self.bucket_seconds,
            "capped": self.capped,
        }

    def bucket_start(self, moment: datetime) -> datetime:
        """The start of the bucket holding ``moment``, in the timezone of ``now``.

        Buckets are aligned to whole multiples of ``bucket_seconds`` since the Unix epoch,
        as ``floor(extract(epoch from t) / bucket) * bucket`` groups rows in SQL; day
        buckets therefore start at midnight UTC.
        """
        size = timedelta(seconds=self.bucket_seconds)
        return (_EPOCH + (moment - _EPOCH) // size * size).astimezone(self.now.tzinfo)

    def buckets(self) -> list[datetime]:
        """The start of every bucket that overlaps ``[since(), now]``, oldest first.

        At most 31 (30 days by day); the last one holds ``now`` and is still filling.
        """
        size = timedelta(seconds=self.bucket_seconds)
        first = self.bucket_start(self.since()).astimezone(UTC)
        last = self.bucket_start(self.now).astimezone(UTC)
        # Stepping in UTC: adding to a local wall time would drift across a DST change.
        return [(first + index * size).astimezone(self.now.tzinfo) for index in range((last - first) // size + 1)]
