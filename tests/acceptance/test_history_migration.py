"""An installation of the old layout (plain pgflow_step and pgflow_event, migration 0017)
moved to the partitioned one (0018, 0019) with its history in place, and back.

The database is migrated to 0017 and filled through SQL as the old engine filled it: finished
and cancelled runs over the last days (attempts, reattempts, a consumed signal, a fan-out's
batch pointing at its attempt), and runs still open (an attempt due, a signal waiting to be
consumed, a paused run). After ``migrate`` every row is there with its id and values, a new
start goes on from the old ids, a worker finishes the open runs, a sweep files the old runs
into their days' partitions, and exactly-once holds. ``migrate pgflow 0017`` then gives the
plain tables back with every row, and the ids still go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.acceptance.conftest import ROOT, server

pytestmark = pytest.mark.timeout(600)

TABLES = ("pgflow_run", "pgflow_step", "pgflow_event", "pgflow_signal", "pgflow_batch", "pgflow_batch_member")
FINISHED_RUNS = 300
DAYS = 6  # the old runs ended over the last six days
WORKER = "old-host:4242:a1b2c3"
THREE = "tests.workflows.ThreeSteps"
PAYMENT = "tests.workflows.WaitsForPayment"
FAN = "tests.fanout_workflows.Fan"
JSON = {"input", "attributes", "output", "error_causes", "details", "payload", "properties", "args", "kwargs"}


def manage(database: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "PGFLOW_TEST_DB_NAME": database, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def shell(database: str, code: str) -> Any:
    """Run ``code`` in ``manage.py shell`` on ``database``; the JSON on its last line of output."""
    return json.loads(manage(database, "shell", "-c", code).stdout.strip().splitlines()[-1])


def connect(database: str) -> psycopg.Connection[Any]:
    return psycopg.connect(**server(), dbname=database, autocommit=True)


def digest(database: str) -> dict[str, dict[int, dict[str, Any]]]:
    """Every row of pgflow's tables by table and id, as JSON, without the new history_day."""
    with connect(database) as conn:
        return {
            table: {
                row[0]: row[1]
                for row in conn.execute(f"SELECT id, to_jsonb(t) - 'history_day' FROM {table} AS t")  # noqa: S608
            }
            for table in TABLES
        }


def max_ids(database: str) -> dict[str, int]:
    with connect(database) as conn:
        return {
            table: conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0]  # noqa: S608
            for table in ("pgflow_run", "pgflow_step", "pgflow_event")
        }


def options(database: str, table: str) -> list[str]:
    """``table``'s storage parameters (``ALTER TABLE … SET``)."""
    with connect(database) as conn:
        found = conn.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = %s::regclass", [table])
        return found.fetchone()[0]


def layout(database: str, table: str) -> tuple[str, str | None, list[str]]:
    """(relkind, the default partition, the other partitions) of ``table``."""
    with connect(database) as conn:
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table]).fetchone()[0]
        default = conn.execute(
            "SELECT partdefid::regclass::text FROM pg_partitioned_table WHERE partrelid = %s::regclass", [table]
        ).fetchone()
        days = conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass "
            "AND inhrelid <> coalesce((SELECT partdefid FROM pg_partitioned_table WHERE partrelid = %s::regclass), 0) "
            "ORDER BY 1",
            [table, table],
        ).fetchall()
    return kind, default[0] if default else None, [name for (name,) in days]


class OldEngine:
    """Writes rows as the engine of migration 0017 wrote them: ids from the identity columns,
    the columns each transition sets, the events in the order it recorded them."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def insert(self, table: str, **columns: Any) -> Any:
        names = ", ".join(columns)
        marks = ", ".join(["%s"] * len(columns))
        values = [Jsonb(v) if k in JSON else v for k, v in columns.items()]
        row = self.conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks}) RETURNING id", values).fetchone()  # noqa: S608
        return row[0]

    def run(self, workflow: str, at: datetime, **columns: Any) -> int:
        fields = {
            "workflow_class": workflow,
            "status": "running",
            "input": {},
            "definition_digest": "0" * 64,
            "created_at": at,
            "updated_at": at,
            "paused_reason": "",
            "attributes": {},
            **columns,
        }
        run_id = self.insert("pgflow_run", **fields)
        self.event(run_id, "started", at, workflow=workflow, key=None)
        return run_id

    def event(self, run_id: int, kind: str, at: datetime, step: int | None = None, **details: Any) -> int:
        return self.insert(
            "pgflow_event", run_id=run_id, event=kind, actor="system", details=details, created_at=at, step_id=step
        )

    def attempt(self, run_id: int, name: str, at: datetime, *, attempt: int = 1, **columns: Any) -> int:
        fields = {
            "step_name": name,
            "attempt": attempt,
            "status": "scheduled",
            "outcome": "",
            "queue": "workflows",
            "priority": 0,
            "created_at": at,
            "scheduled_at": at,
            "worker": "",
            "run_id": run_id,
            **columns,
        }
        return self.insert("pgflow_step", **fields)

    def completed(self, run_id: int, name: str, at: datetime, output: Any, **columns: Any) -> tuple[int, datetime]:
        """An attempt claimed at ``at`` and completed 20 ms later, with its event; (id, its end)."""
        end = at + timedelta(milliseconds=20)
        step = self.attempt(
            run_id,
            name,
            at,
            status="completed",
            outcome="completed",
            started_at=at + timedelta(milliseconds=5),
            finished_at=end,
            worker=WORKER,
            output=output,
            **columns,
        )
        self.event(run_id, "step_completed", end, step)
        return step, end

    def end(self, run_id: int, at: datetime, status: str = "finished") -> None:
        self.conn.execute(
            "UPDATE pgflow_run SET status = %s, current_step = NULL, finished_at = %s, updated_at = %s WHERE id = %s",
            [status, at, at, run_id],
        )
        self.event(run_id, status, at)

    def three_steps(self, at: datetime, *, failures: int = 0) -> int:
        run_id = self.run(THREE, at)
        _, at = self.completed(run_id, "one", at, {"n": 1})
        for number in range(1, failures + 1):
            failed = self.attempt(
                run_id,
                "two",
                at,
                attempt=number,
                status="failed",
                outcome="reattempt",
                started_at=at,
                finished_at=at + timedelta(milliseconds=3),
                worker=WORKER,
                error_class="ConnectionError",
                error_message="the mail server went away",
                error_backtrace='Traceback (most recent call last):\n  File "shop/mail.py", line 9\nConnectionError',
                error_causes=[],
            )
            at += timedelta(milliseconds=3)
            self.event(run_id, "step_failed", at, failed, error_class="ConnectionError")
            at += timedelta(seconds=1)
        _, at = self.completed(run_id, "two", at, {"n": 2}, attempt=failures + 1)
        _, at = self.completed(run_id, "three", at, {"n": 3})
        self.end(run_id, at)
        return run_id

    def paid(self, at: datetime) -> int:
        """A WaitsForPayment whose charge waited for its signal and consumed it."""
        run_id = self.run(PAYMENT, at)
        _, at = self.completed(run_id, "order", at, "ordered")
        received = at + timedelta(minutes=3)
        signal = self.insert(
            "pgflow_signal", run_id=run_id, name="payment", payload={"amount": 5}, received_at=received
        )
        self.event(run_id, "signal_received", received, name="payment", payload_bytes=13)
        end = received + timedelta(milliseconds=20)
        charge = self.attempt(
            run_id,
            "charge",
            at,
            status="completed",
            outcome="completed",
            scheduled_at=received,
            started_at=received + timedelta(milliseconds=5),
            finished_at=end,
            waiting_since=at,
            deadline_at=at + timedelta(hours=1),
            worker=WORKER,
            output={"paid": {"amount": 5}},
            signal_id=signal,
        )
        self.event(run_id, "step_completed", end, charge)
        self.conn.execute(
            "UPDATE pgflow_signal SET consumed_at = %s, consumed_by_id = %s WHERE id = %s", [end, charge, signal]
        )
        _, end = self.completed(run_id, "ship", end, "shipped")
        self.end(run_id, end)
        return run_id

    def fanned(self, at: datetime) -> int:
        """A Fan whose batch of two jobs succeeded: the batch points at the fan_out's attempt."""
        run_id = self.run(FAN, at)
        batch_id = uuid.uuid4()
        step = self.attempt(
            run_id, "fan", at, status="waiting", started_at=at, waiting_since=at, worker=WORKER, batch_id=None
        )
        self.conn.execute(
            "INSERT INTO pgflow_batch (id, run_id, step_id, description, properties, status, total, succeeded, "
            "failed, created_at) VALUES (%s, %s, %s, '', '{}', 'open', 2, 0, 0, %s)",
            [batch_id, run_id, step, at],
        )
        self.conn.execute("UPDATE pgflow_step SET batch_id = %s WHERE id = %s", [batch_id, step])
        self.event(run_id, "fan_out_opened", at, step, batch_id=str(batch_id), size=2)
        done = at + timedelta(seconds=2)
        for position in range(2):
            self.insert(
                "pgflow_batch_member",
                batch_id=batch_id,
                position=position,
                func="tests.fanout_tasks.ok",
                args=[position],
                kwargs={},
                task_id=uuid.uuid4().hex,
                status="succeeded",
                enqueued_at=at,
                finished_at=done,
            )
        self.conn.execute(
            "UPDATE pgflow_batch SET status = 'finished', succeeded = 2, finished_at = %s WHERE id = %s",
            [done, batch_id],
        )
        self.event(run_id, "fan_out_finished", done, step, batch_id=str(batch_id), total=2, succeeded=2, failed=0)
        self.conn.execute(
            "UPDATE pgflow_step SET status = 'completed', outcome = 'completed', finished_at = %s WHERE id = %s",
            [done, step],
        )
        self.event(run_id, "step_completed", done, step)
        _, done = self.completed(run_id, "after", done, {"fan": None})
        self.end(run_id, done)
        return run_id

    def cancelled(self, at: datetime) -> int:
        """A WaitsForPayment an operator cancelled while its charge waited."""
        run_id = self.run(PAYMENT, at)
        _, at = self.completed(run_id, "order", at, "ordered")
        self.attempt(
            run_id,
            "charge",
            at,
            status="cancelled",
            outcome="cancelled",
            started_at=at,
            waiting_since=at,
            deadline_at=at + timedelta(hours=1),
            finished_at=at + timedelta(minutes=10),
            worker=WORKER,
        )
        self.end(run_id, at + timedelta(minutes=10), "cancelled")
        return run_id


def populate(database: str, now: datetime) -> dict[str, Any]:
    """An old installation's rows: ended runs over the last ``DAYS`` days, and the open ones."""
    with connect(database) as conn, conn.transaction():
        old = OldEngine(conn)
        first = now - timedelta(days=DAYS)
        ended = []
        for n in range(FINISHED_RUNS):
            at = first + (now - timedelta(hours=1) - first) * n / FINISHED_RUNS
            kind = n % 10
            if kind == 7:
                ended.append(old.paid(at))
            elif kind == 8:
                ended.append(old.fanned(at))
            elif kind == 9:
                ended.append(old.cancelled(at))
            else:
                ended.append(old.three_steps(at, failures=1 if kind == 3 else 0))
        recent = now - timedelta(minutes=30)
        # Open: an attempt due, which no worker has claimed yet.
        due = old.run(THREE, recent, current_step="two")
        _, at = old.completed(due, "one", recent, {"n": 1})
        old.attempt(due, "two", at)
        # Open: a signal received while the charge waited, not yet consumed.
        waiting = old.run(PAYMENT, recent, current_step="charge")
        _, at = old.completed(waiting, "order", recent, "ordered")
        old.insert("pgflow_signal", run_id=waiting, name="payment", payload={"amount": 7}, received_at=at)
        old.event(waiting, "signal_received", at, name="payment", payload_bytes=13)
        old.attempt(waiting, "charge", at, waiting_since=at, deadline_at=at + timedelta(hours=1), started_at=at)
        # Open: paused by its policy after a failure.
        paused = old.run(THREE, recent, status="paused", current_step="two", paused_reason="ValueError: bad input")
        _, at = old.completed(paused, "one", recent, {"n": 1})
        failed = old.attempt(
            paused,
            "two",
            at,
            status="failed",
            outcome="paused",
            started_at=at,
            finished_at=at,
            worker=WORKER,
            error_class="ValueError",
            error_message="bad input",
        )
        old.event(paused, "step_failed", at, failed, error_class="ValueError")
        old.event(paused, "paused", at, reason="ValueError: bad input")
    return {"ended": ended, "open": [due, waiting, paused], "paused": paused}


def test_an_installation_with_history_migrates_forward_files_it_and_rolls_back(new_database):
    manage(new_database, "migrate", "--no-input", "pgflow", "0017")
    now = datetime.now(UTC)
    rows = populate(new_database, now)
    before, old_max = digest(new_database), max_ids(new_database)
    assert len(before["pgflow_step"]) > 2 * FINISHED_RUNS and len(before["pgflow_event"]) > 4 * FINISHED_RUNS

    manage(new_database, "migrate", "--no-input")
    assert digest(new_database) == before  # every row, with its id and its values
    for table in ("pgflow_step", "pgflow_event"):
        assert layout(new_database, table) == ("p", f"{table}_live", [])  # history starts live
    # Every ended run leaves dead rows in these three: unthrottled autovacuum passes (0023).
    for table in ("pgflow_run", "pgflow_step_live", "pgflow_event_live"):
        assert "autovacuum_vacuum_cost_delay=0" in options(new_database, table), table

    # A start through the engine goes on from the old ids.
    started = shell(
        new_database,
        "import json\nfrom tests import workflows as wf\nrun = wf.ThreeSteps.start()\n"
        "print(json.dumps([run.pk, run.steps.get().pk, run.events.get().pk]))",
    )
    assert started[0] > old_max["pgflow_run"]
    assert started[1] > old_max["pgflow_step"]
    assert started[2] > old_max["pgflow_event"]

    # A worker of the new code finishes what the old one left open.
    manage(new_database, "pgflow", "resume", str(rows["paused"]))
    manage(new_database, "pgflow_worker", "--burst")
    with connect(new_database) as conn:
        status = dict(conn.execute("SELECT id, status FROM pgflow_run").fetchall())
        charge = conn.execute(
            "SELECT s.output, g.consumed_by_id = s.id FROM pgflow_step AS s JOIN pgflow_signal AS g "
            "ON g.id = s.signal_id WHERE s.run_id = %s",
            [rows["open"][1]],
        ).fetchone()
    assert {status[run_id] for run_id in [*rows["open"], started[0]]} == {"finished"}
    assert charge == ({"paid": {"amount": 7}}, True)  # the old signal, consumed by the new attempt

    # The sweeps (the worker's, and this one after the open runs' ends have settled) file every
    # ended run, the old ones into the days they ended.
    filed = shell(
        new_database,
        "import json\nfrom datetime import timedelta\nfrom pgflow import store\nfrom pgflow.runtime import sweep\n"
        "print(json.dumps(sweep.run(at=store.now() + timedelta(minutes=2))))",
    )
    assert filed["filed_runs"] >= len(rows["open"]) + 1 and filed["purged_runs"] == 0
    with connect(new_database) as conn:
        places = conn.execute(
            "SELECT r.id, to_char(timezone('UTC', r.finished_at), 'YYYYMMDD'), "
            "array_agg(DISTINCT s.tableoid::regclass::text), "
            "(SELECT array_agg(DISTINCT e.tableoid::regclass::text) FROM pgflow_event AS e WHERE e.run_id = r.id) "
            "FROM pgflow_run AS r JOIN pgflow_step AS s ON s.run_id = r.id GROUP BY r.id"
        ).fetchall()
        live = [conn.execute(f"SELECT count(*) FROM {t}_live").fetchone()[0] for t in ("pgflow_step", "pgflow_event")]  # noqa: S608
    for run_id, day, steps, events in places:
        assert (steps, events) == ([f"pgflow_step_{day}"], [f"pgflow_event_{day}"]), run_id
    assert live == [0, 0]
    ended_days = {day for _, day, _, _ in places}
    assert len(ended_days) >= DAYS
    assert {f"pgflow_step_{day}" for day in ended_days} <= set(layout(new_database, "pgflow_step")[2])
    after = digest(new_database)
    for table in ("pgflow_step", "pgflow_event"):
        # The old runs' rows moved into their days' partitions unchanged.
        ended = set(rows["ended"])
        assert {k: v for k, v in after[table].items() if v["run_id"] in ended} == {
            k: v for k, v in before[table].items() if v["run_id"] in ended
        }
    checked = shell(new_database, "from tests.invariants import assert_exactly_once\nprint(assert_exactly_once())")
    assert checked == len(status)

    # The rollback: the plain tables again, with every row, and the identity going on.
    last = max_ids(new_database)
    manage(new_database, "migrate", "--no-input", "pgflow", "0017")
    assert digest(new_database) == after
    with connect(new_database) as conn:
        for table in ("pgflow_step", "pgflow_event"):
            assert conn.execute("SELECT relkind FROM pg_class WHERE oid = %s::regclass", [table]).fetchone() == ("r",)
            assert conn.execute(
                "SELECT attidentity FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'id'", [table]
            ).fetchone() == ("d",)
        leftovers = conn.execute(
            "SELECT relname FROM pg_class WHERE relname ~ '^pgflow_(step|event)_(live|[0-9]{8})$' "
            "OR relname = 'pgflow_history_state'"
        ).fetchall()
        assert leftovers == []
        keys = conn.execute(
            "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' "
            "AND confrelid = 'pgflow_step'::regclass ORDER BY 1"
        ).fetchall()
        assert keys == [("pgflow_batch",), ("pgflow_event",), ("pgflow_signal",)]  # the old keys, back
        old = OldEngine(conn)
        run_id = old.run(THREE, datetime.now(UTC))  # the old code's insert: ids from the identity
        step_id = old.attempt(run_id, "one", datetime.now(UTC))
    assert run_id > last["pgflow_run"] and step_id > last["pgflow_step"]
    assert options(new_database, "pgflow_run") == ["fillfactor=70"]  # 0017's, and the server's autovacuum

    # And forward once more, ids still going on.
    manage(new_database, "migrate", "--no-input")
    assert layout(new_database, "pgflow_step") == ("p", "pgflow_step_live", [])
    again = shell(
        new_database,
        "import json\nfrom tests import workflows as wf\nrun = wf.ThreeSteps.start()\n"
        "print(json.dumps([run.pk, run.steps.get().pk]))",
    )
    assert again[0] > run_id and again[1] > step_id
