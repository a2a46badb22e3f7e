"""Prometheus metrics through ``prometheus_client`` (``django-pgflow[metrics]``).

Two kinds of numbers, so that several processes never count one thing twice:

- Counters and histograms count what *this process* did, once, where it happened: the
  worker that ended an attempt counts it (each attempt ends in one worker), the process
  that called ``start()`` or ``pgflow.signal()`` counts the run or the signal when its
  transaction commits. A worker serves its own on ``pgflow_worker --metrics-port N``;
  the web process serves its own on ``/metrics``. Prometheus sums them across instances.
- Gauges of the whole cluster are read from the database at scrape time, only by the
  ``/metrics`` view (never by a worker's port, or each worker would report them again),
  and cached for ``PGFLOW["METRICS_CACHE"]`` seconds so a scrape per target stays cheap.

Histogram buckets are the edges of ``pgflow.core.histogram``'s log-scale buckets at every
doubling (1 ms, 2 ms, … about 50 days): each Prometheus bucket is a union of whole
insights buckets, so the two agree on what fell below each edge.

Without ``prometheus_client`` every function here returns at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone

from .. import backlog, db, readdb
from ..core import histogram, phases
from ..core.flow import CANCEL, COMPLETE, FINISH, OUTCOME_WORDS, SKIP
from ..core.states import OPEN_STEP, RunStatus

# Imported where first used, not here: a process that never counts (an idle worker, a
# management command) does not pay prometheus_client's memory for being able to.
_INSTALLED = find_spec("prometheus_client") is not None  # without the [metrics] extra, metrics are off

if TYPE_CHECKING:
    from ..store import Claim

BUCKETS = tuple(histogram.FLOOR * 2**k for k in range(33))  # seconds: 1 ms .. 2**32 ms (~50 days)

# Step.outcome words that end a run, when the worker's attempt applied them; "completed"
# ends it too when the step was the last.
_RUN_ENDS = {OUTCOME_WORDS[FINISH]: RunStatus.FINISHED, OUTCOME_WORDS[CANCEL]: RunStatus.CANCELLED}
_STEP_ENDS = frozenset({OUTCOME_WORDS[COMPLETE], OUTCOME_WORDS[SKIP]})  # the run goes on, or finishes
_NOT_ENDED = frozenset({"parked", "ignored"})  # the attempt goes on (parked) or another path ended it

_lock = threading.Lock()
_made: dict[str, Any] = {}
# Each metric's child per label values, as prometheus_client's labels() returns it: that call
# checks and joins the values under a lock on every use, which each step would pay.
_children: dict[tuple[str, ...], Any] = {}


def available() -> bool:
    return _INSTALLED


# Whether this process counts. pgflow_worker turns it off in a worker whose counts no one
# could read (no --metrics-port, no PROMETHEUS_MULTIPROC_DIR): counting cost a busy worker
# about a tenth of its Python time. Every other process counts when metrics are available.
_counting = _INSTALLED


def counting() -> bool:
    return _counting


def stop_counting() -> None:
    global _counting
    _counting = False


def _metric(name: str) -> Any:
    """The process's metric ``name``, made on first use in the default registry."""
    found = _made.get(name)
    if found is not None:
        return found
    with _lock:
        if name not in _made:
            _made[name] = _build(name)
    return _made[name]


def _child(name: str, *labels: str) -> Any:
    """``_metric(name).labels(*labels)``, looked up once per label values."""
    key = (name, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = _metric(name).labels(*labels)
    return child


def _build(name: str) -> Any:
    import prometheus_client as client  # lazy: optional extra django-pgflow[metrics]

    step_labels = ["workflow_class", "step"]
    if name == "attempts":
        return client.Counter(
            "pgflow_attempts", "Attempts ended by this process, by outcome", [*step_labels, "outcome"]
        )
    if name == "runs_started":
        return client.Counter("pgflow_runs_started", "Runs started (committed) by this process", ["workflow_class"])
    if name == "runs_ended":
        return client.Counter(
            "pgflow_runs_ended", "Runs this process's attempts finished or cancelled", ["workflow_class", "status"]
        )
    if name == "signals":
        return client.Counter(
            "pgflow_signals_received", "Signals delivered (committed) by this process", ["workflow_class", "signal"]
        )
    if name == "approval_emails":
        return client.Counter(
            "pgflow_approval_emails", "Approval emails this process sent or failed to send", ["outcome"]
        )
    if name in phases.PHASES:
        return client.Histogram(
            f"pgflow_step_{name}_seconds",
            f"The {name} phase of attempts ended by this process",
            step_labels,
            buckets=BUCKETS,
        )
    raise KeyError(name)


def run_started(workflow_class: str) -> None:
    if _counting:
        db.on_commit(lambda: _child("runs_started", workflow_class).inc())


def signal_received(workflow_class: str, name: str) -> None:
    if _counting:
        db.on_commit(lambda: _child("signals", workflow_class, name).inc())


def approval_email(outcome: str, count: int = 1) -> None:
    """``outcome``: "sent" (``count`` messages) or "failed" (one opened approval's mail)."""
    if _counting:
        _child("approval_emails", outcome).inc(count)


BEFORE_BODY = "ended_before_body"  # the runner's word for an attempt its prepare ended or parked


def settled_before_body(step_id: int) -> str | None:
    """The outcome an attempt ``BEFORE_BODY`` ended with, as its row holds it (``skipped``,
    ``cancelled``, ``paused`` …), or None when it did not end: a signal step parked to wait
    for its signal (its row still open) goes on, and is counted when it truly ends. One
    query, on that rare path only."""
    from ..models import Step  # lazy: app registry; pgflow.observability imports before the models load

    row = Step.objects.filter(pk=step_id).values_list("status", "outcome").first()
    if row is None or row[0] in OPEN_STEP:
        return None
    return row[1] or None


def attempt_ended(held: Claim, outcome: str, *, applied: bool, last_step: bool) -> None:
    """Count an attempt the worker ended (``outcome`` as the runner logs it)."""
    if not _counting or not applied or outcome in _NOT_ENDED:
        return
    if outcome == BEFORE_BODY:
        # A park on a signal would count the attempt twice (here and when it completes), and
        # an end in prepare would be counted under a word no row holds.
        settled = settled_before_body(held.step_id)
        if settled is None:
            return
        outcome = settled
    path = held.run_fields.get("workflow_class", "")
    _child("attempts", path, held.step_name, outcome).inc()
    status = _RUN_ENDS.get(outcome) or (RunStatus.FINISHED if outcome in _STEP_ENDS and last_step else None)
    if status:
        _child("runs_ended", path, status).inc()
    fields = held.step_fields
    durations = phases.of_attempt(
        created=fields.get("created_at"),
        scheduled=fields.get("scheduled_at"),
        started=held.started_at,
        waiting_since=fields.get("waiting_since"),
        throttled_until=fields.get("throttled_until"),
        finished=timezone.now(),
    )
    for phase, seconds in durations.items():
        if seconds is not None:
            _child(phase, path, held.step_name).observe(seconds)


def serve(port: int, *, address: str = "0.0.0.0") -> None:  # noqa: S104 - a scrape target listens for Prometheus
    """Serve this process's registry on ``port`` (a daemon thread): ``pgflow_worker --metrics-port``."""
    if not _INSTALLED:
        raise RuntimeError("--metrics-port needs prometheus_client: pip install 'django-pgflow[metrics]'")
    import prometheus_client  # lazy: optional extra django-pgflow[metrics]

    prometheus_client.start_http_server(port, addr=address)


# --- the /metrics view's gauges, read from the database at scrape time --------------------------

# Each gauge's query, named; one round trip each, over the partial indexes of open rows. Open
# attempts are in the live partition only (pgflow.store.history): naming the parent would
# also scan every day of history, whose partitions have no index on status. The due attempts
# are counted in each queue holding any, one range of pgflow_step_due each (pgflow.backlog),
# not by a bound on scheduled_at, which reads every scheduled row, a backlog of future ones too.
_DUE_BY_QUEUE = (
    "SELECT q.queue, count(*), EXTRACT(EPOCH FROM (%(now)s - min(s.scheduled_at))) FROM "
    + backlog.DUE_BEFORE.format(columns="s.scheduled_at", join="", where="", order="")
    + " GROUP BY q.queue"
)
_THROUGH_NOW = timedelta(microseconds=1)  # DUE_BEFORE's bound is strict: due at now or before
_PAUSED_BY_CLASS = "SELECT workflow_class, count(*) FROM pgflow_run WHERE status = 'paused' GROUP BY workflow_class"
_PAST_DEADLINE = "SELECT count(*) FROM pgflow_step_live WHERE status = 'waiting' AND deadline_at <= %(now)s"


def cluster_gauges(now: datetime) -> dict[str, Any]:
    """The cluster-wide figures: due steps and the oldest's age per queue, paused runs per
    class, waits past their deadline, live workers per queue; read from
    ``PGFLOW["READ_DATABASE"]`` when one is set (``replica``: its lag, or that it fell back)."""
    from ..models import Worker  # lazy: app registry; pgflow.observability imports before the models load

    with readdb.reading() as route, connections[route.alias].cursor() as cursor:
        scheduled = backlog.scheduled_queues(cursor)
        cursor.execute(_DUE_BY_QUEUE, {"queues": scheduled, "before": now + _THROUGH_NOW, "now": now})
        due = {queue: (count, float(age)) for queue, count, age in cursor.fetchall()}
        cursor.execute(_PAUSED_BY_CLASS)
        paused = dict(cursor.fetchall())
        cursor.execute(_PAST_DEADLINE, {"now": now})
        past_deadline = cursor.fetchone()[0]
        workers: dict[str, int] = {}
        for queues in Worker.objects.using(route.alias).live(now).values_list("queues", flat=True):
            for queue in queues or ():
                workers[queue] = workers.get(queue, 0) + 1
    return {"due": due, "paused": paused, "past_deadline": past_deadline, "workers": workers, "replica": route}


class ClusterCollector:
    """A ``prometheus_client`` collector of :func:`cluster_gauges`, cached for ``ttl`` seconds."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def figures(self) -> dict[str, Any]:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] >= self.ttl:
                self._cached = (time.monotonic(), cluster_gauges(timezone.now()))
            return self._cached[1]

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily  # lazy: optional extra django-pgflow[metrics]

        figures = self.figures()
        due = GaugeMetricFamily("pgflow_steps_due", "Attempts due now that no worker has claimed yet", labels=["queue"])
        age = GaugeMetricFamily(
            "pgflow_steps_due_oldest_age_seconds",
            "How long the oldest due attempt has waited for a worker",
            labels=["queue"],
        )
        workers = GaugeMetricFamily(
            "pgflow_workers_live", "Workers with a fresh heartbeat serving the queue", labels=["queue"]
        )
        for queue in sorted(set(figures["due"]) | set(figures["workers"])):
            count, oldest = figures["due"].get(queue, (0, 0.0))
            due.add_metric([queue], count)
            age.add_metric([queue], oldest)
            workers.add_metric([queue], figures["workers"].get(queue, 0))
        paused = GaugeMetricFamily("pgflow_runs_paused", "Runs paused now", labels=["workflow_class"])
        for path, count in sorted(figures["paused"].items()):
            paused.add_metric([path], count)
        deadline = GaugeMetricFamily(
            "pgflow_waits_past_deadline", "Signal waits past their wait_timeout now", value=figures["past_deadline"]
        )
        yield from (due, age, workers, paused, deadline)
        route = figures.get("replica")
        if route is not None and route.replica is not None:
            # Only with a READ_DATABASE: how old the other gauges may be, and whether the primary served them.
            yield GaugeMetricFamily(
                "pgflow_read_replica_fallback",
                "1 while the read replica cannot be reached and the primary serves the gauges",
                value=1 if route.fell_back else 0,
            )
            if route.lag_seconds is not None:
                yield GaugeMetricFamily(
                    "pgflow_read_replica_lag_seconds",
                    "How far the read replica's replay is behind the primary (0 when it applied everything)",
                    value=route.lag_seconds,
                )
