"""The read replica's lag in words (pgflow.core.replicas) and READ_DATABASE's validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgflow.conf import validate
from pgflow.core.replicas import Standby, fallback_note, lag, lsn, size

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def standby(**changes) -> Standby:
    values = {
        "in_recovery": True,
        "replayed_at": NOW - timedelta(seconds=4),
        "now": NOW,
        "replay_lsn": lsn("0/3000000"),
        "paused": False,
        "primary_lsn": lsn("0/3000800"),
    }
    return Standby(**{**values, **changes})


def test_an_lsn_reads_as_its_byte_position():
    assert lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert lsn(None) is None


def test_a_standby_behind_says_by_how_long_and_how_much_wal():
    found = lag("replica", standby())
    assert (found.seconds, found.behind_bytes) == (4.0, 2048)
    assert "about 4.0s behind the primary (2.0 kB of WAL to apply)" in found.note


def test_a_standby_that_applied_everything_is_up_to_date_however_old_its_last_commit():
    # An idle primary: the last commit replayed is an hour old, yet nothing is missing.
    found = lag("replica", standby(replayed_at=NOW - timedelta(hours=1), primary_lsn=lsn("0/3000000")))
    assert (found.seconds, found.behind_bytes) == (0.0, 0)
    assert "up to date with the primary (last replayed commit 3600.0s old)" in found.note


def test_no_replay_yet_is_said_so_not_given_a_made_up_age():
    found = lag("replica", standby(replayed_at=None))
    assert found.seconds is None
    assert "2.0 kB of WAL behind, no transaction replayed since the standby started" in found.note


def test_paused_replay_is_named():
    assert "its replay is PAUSED" in lag("replica", standby(paused=True)).note


def test_a_read_database_that_is_no_standby_reports_no_lag():
    found = lag("replica", standby(in_recovery=False, primary_lsn=None))
    assert found.seconds is None and "not a standby" in found.note


def test_the_fallback_note_names_the_replica_the_error_and_the_retry():
    note = fallback_note("replica", "connection refused", "12:00:01 UTC", 10)
    assert note.startswith("The replica 'replica' cannot be reached (connection refused)")
    assert "from the primary since 12:00:01 UTC" in note and "every 10s" in note


def test_sizes_in_words():
    assert [size(n) for n in (812, 3482, 12 << 20)] == ["812 B", "3.4 kB", "12.0 MB"]


@pytest.mark.parametrize("alias", ["replica", 5, ""])
def test_an_unknown_read_database_names_the_aliases_of_databases(alias):
    assert validate({"READ_DATABASE": alias}) == [
        f"PGFLOW['READ_DATABASE'] must be None or the alias of a database in DATABASES ('default'), got {alias!r}"
    ]


def test_a_known_read_database_or_none_passes():
    assert validate({"READ_DATABASE": "default"}) == validate({"READ_DATABASE": None}) == []
