"""Links between runs: a re-run's original, a child's parent, a schedule's last run and a
tick's run. They are not database foreign keys (migration 0020): PostgreSQL checks every key
that points at a run for each run deleted, which was most of what retention spent on one. A
batch member's child run stays a key (see ``BatchMember.child``).

In their place, retention nulls the links to the runs it deletes (``retention``), and
whoever writes a link to a run it neither created nor locked in its transaction holds that
run here first, with the lock a foreign key's check takes (``FOR KEY SHARE``) until its
transaction ends. Retention's ``DELETE`` waits for it, and a run retention deleted first is
reported gone, as the key's check reported it at commit. The run lock (``FOR UPDATE``) holds
a run as well: a link to a locked run needs nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError

from ..db import connection


def held_runs(run_ids: Iterable[int]) -> set[int]:
    """Hold the runs ``run_ids`` until the transaction ends; returns those that exist."""
    ids = sorted(set(run_ids))
    if not ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM pgflow_run WHERE id = ANY(%s) ORDER BY id FOR KEY SHARE", [ids])
        return {row[0] for row in cursor.fetchall()}


def hold_run(run_id: int, *, by: str) -> None:
    """Hold the run ``run_id`` that ``by`` links to; IntegrityError when it is gone."""
    if not held_runs([run_id]):
        raise IntegrityError(f"{by} links to run {run_id}, which retention deleted meanwhile; nothing was linked")
