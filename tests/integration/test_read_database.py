"""``PGFLOW["READ_DATABASE"]`` naming a replica that is down: refused, or a host that takes the
connection and never answers. The reads fall back to the primary within ``connect_timeout``,
say so, and the replica is not tried again at once. (The replica that is up, and which reads
go where, and the pages' notes, are tests/acceptance/test_read_replica.py, on a real standby.)"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from django.db import connections

from pgflow import readdb


def _alias(name: str, port: int) -> None:
    primary = connections.settings["default"]
    connections.settings[name] = {**primary, "HOST": "127.0.0.1", "PORT": str(port), "OPTIONS": {}}


@pytest.fixture
def replica(settings, django_db_blocker) -> Iterator[str]:
    """A replica alias whose port refuses every connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    yield from _configured(settings, django_db_blocker, "down_replica", port)


@pytest.fixture
def silent_replica(settings, django_db_blocker) -> Iterator[str]:
    """A replica alias on a socket that completes the TCP handshake and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted: the kernel's backlog answers the handshake
        yield from _configured(settings, django_db_blocker, "silent_replica", listener.getsockname()[1])


def _configured(settings, blocker, name: str, port: int) -> Iterator[str]:
    # No test database: a replica found down is never followed by a query on the primary.
    # (Django's test case would refuse any alias it was not told of, this one included.)
    _alias(name, port)
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "READ_DATABASE": name}
    readdb._down.clear()
    try:
        with blocker.unblock():
            yield name
    finally:
        connections[name].close()
        del connections[name]
        del connections.settings[name]
        readdb._down.clear()


def test_a_refused_replica_falls_back_to_the_primary_and_is_not_retried_at_once(replica):
    first = readdb.route()
    assert (first.alias, first.replica, first.fell_back) == ("default", replica, True)
    assert first.note is not None
    assert f"The replica {replica!r} cannot be reached (" in first.note and "refused" in first.note.lower()
    assert "read from the primary since" in first.note and "tried again every 10s" in first.note
    with readdb.reading() as inside:
        assert readdb.alias() == "default" and inside.fell_back
    assert readdb._down[replica][0] <= time.monotonic()
    noted = readdb._down[replica]
    again = readdb.route()
    assert again.fell_back and readdb._down[replica] is noted, "within RETRY_SECONDS the replica is not tried"


def test_a_replica_that_never_answers_costs_one_connect_timeout(silent_replica):
    began = time.monotonic()
    found = readdb.route()
    waited = time.monotonic() - began
    assert found.fell_back and found.alias == "default"
    assert found.note is not None and "(connection timeout expired)" in found.note
    assert connections[silent_replica].settings_dict["OPTIONS"]["connect_timeout"] == readdb.CONNECT_TIMEOUT
    assert waited < 30, f"the page waited {waited:.0f}s for a silent replica"  # not the OS's minutes


def test_without_a_read_database_nothing_is_said_and_the_primary_serves():
    found = readdb.route()
    assert (found.alias, found.replica, found.note, found.fell_back) == ("default", None, None, False)
