"""What a read replica's state means for the dashboard, from plain values.

``pgflow.readdb`` reads a standby's replay position and time and the primary's write
position; this module turns them into the lag figure and the sentence the dashboard shows.
Both positions are needed: ``pg_last_xact_replay_timestamp()`` alone reads as "far behind"
on a standby that replayed everything of a primary that has simply been idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


def lsn(text: str | None) -> int | None:
    """A ``pg_lsn`` as PostgreSQL writes it (``"16/B374D848"``) as a byte position."""
    if text is None:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def size(count: int) -> str:
    """Bytes in words: ``"812 B"``, ``"3.4 kB"``, ``"12.0 MB"``."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


@dataclass(frozen=True)
class Standby:
    """What the read database says of itself, and the primary's write position."""

    in_recovery: bool
    replayed_at: datetime | None  # pg_last_xact_replay_timestamp(): None before any replay
    now: datetime  # the standby's now(), to measure replayed_at against the same clock
    replay_lsn: int | None  # pg_last_wal_replay_lsn()
    paused: bool  # pg_is_wal_replay_paused()
    primary_lsn: int | None  # the primary's pg_current_wal_lsn(); None when it was not read


@dataclass(frozen=True)
class Lag:
    seconds: float | None  # None: no figure can be given honestly (not a standby)
    behind_bytes: int | None
    note: str


def lag(alias: str, state: Standby) -> Lag:
    """How far behind the primary the read database is, and that in a sentence."""
    where = f"Aggregates (run list, insights, metrics) are read from the replica {alias!r}"
    if not state.in_recovery:
        return Lag(None, None, f"{where}, which is not a standby (not in recovery): no replication lag to report.")
    behind = None
    if state.primary_lsn is not None and state.replay_lsn is not None:
        behind = max(state.primary_lsn - state.replay_lsn, 0)
    age = None if state.replayed_at is None else max((state.now - state.replayed_at).total_seconds(), 0.0)
    since = (
        "no transaction replayed since the standby started" if age is None else f"last replayed commit {age:.1f}s old"
    )
    if state.paused:
        held = "" if behind is None else f", {size(behind)} of WAL not applied"
        return Lag(age, behind, f"{where}: its replay is PAUSED ({since}{held}); the figures may be old.")
    if behind == 0:
        # Everything the primary wrote is applied: an old last commit means an idle primary, not lag.
        return Lag(0.0, 0, f"{where}: up to date with the primary ({since}).")
    if behind is None:
        return Lag(age, None, f"{where}: {since}; the primary's position could not be read.")
    if age is None:
        return Lag(None, behind, f"{where}: {size(behind)} of WAL behind, {since}.")
    return Lag(age, behind, f"{where}: about {age:.1f}s behind the primary ({size(behind)} of WAL to apply).")


def fallback_note(alias: str, error: str, since: str, retry_seconds: float) -> str:
    """The sentence shown while the replica cannot be reached and the primary serves its reads."""
    return (
        f"The replica {alias!r} cannot be reached ({error}); the run list, insights and metrics are read "
        f"from the primary since {since}, and the replica is tried again every {retry_seconds:g}s."
    )
