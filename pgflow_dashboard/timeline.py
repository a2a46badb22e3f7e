"""Where a workflow run's time went, from its step rows and its audit trail.

Each attempt (one ``Step`` row) splits into up to five phases by the one rule of
:mod:`pgflow.core.phases` (waited, throttled, queued, ran, waiting; ran runs up to now
while the body runs), and each pause of the run (a ``paused`` event up to the event that
ended it) is a period of its own, so a long gap on the chart explains itself. An attempt of
a limited step records ``throttled_until`` when the claim lets it through; one not claimed
yet is throttled up to now while the step dict says ``held`` (its gate has no room: the run
page reads the gate rows), queued otherwise. The run page's step table prints
:func:`durations`; ``/timeline.json`` serves :func:`chart`, which ``charts.js`` draws as
one bar row per attempt with the paused periods as bands across all rows.

Pure: plain dicts with aware datetimes in, plain JSON-ready dicts out. Step dicts use the
``Step`` field names; event dicts need ``event`` and ``created_at``. A fan-out attempt whose
batch holds child runs also carries ``children``: ``{"total", "ended"}`` (its waiting phase is
then drawn as its own series, and its tooltip counts them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pgflow.core import events, phases
from pgflow.core.events import EventKind
from pgflow.core.states import OPEN_STEP, RunStatus, StepStatus

from .timeformat import duration

OPEN = OPEN_STEP
PHASES = phases.PHASES
PAUSE_ENDS = events.PAUSE_ENDS

# A ran phase is coloured by how its attempt ended; any other status is "ran_cancelled".
RAN_SERIES: dict[str, str] = {
    StepStatus.COMPLETED: "ran_ok",
    StepStatus.SKIPPED: "ran_ok",
    StepStatus.FAILED: "ran_failed",
    StepStatus.IN_PROGRESS: "ran_open",
    StepStatus.WAITING: "ran_open",
}

# Every series the chart draws, in legend order: name -> (colour, label).
# Any two series differ by at least 80 in RGB distance, and each but the paused band (drawn
# translucent, behind the bars) stands 120 off the admin's light (#fff) and dark (#121212)
# backgrounds: tests/unit/test_timeline_colours.py.
SERIES: dict[str, tuple[str, str]] = {
    "waited": ("#94a3b8", "waited"),
    "throttled": ("#92400e", "throttled by a limit"),
    "queued": ("#f59e0b", "queued"),
    "ran_ok": ("#16a34a", "ran: completed or skipped"),
    "ran_failed": ("#dc2626", "ran: failed"),
    "ran_open": ("#2563eb", "running"),
    "ran_cancelled": ("#7c3aed", "ran: cancelled"),
    "waiting": ("#22d3ee", "waiting for a signal or batch"),
    "waiting_children": ("#0e7490", "waiting for child runs"),
    "paused": ("#f9a8d4", "run paused"),
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

StepRow = Mapping[str, Any]  # a Step's fields by name
EventRow = Mapping[str, Any]  # an Event's fields by name


def segments(step: StepRow, *, now: datetime) -> list[dict[str, Any]]:
    """The attempt's phases in time order (:func:`pgflow.core.phases.pieces`):
    ``[{"kind", "from", "to"}]``, datetimes in UTC, each of some length.

    An open attempt (scheduled, waiting, in progress) runs to ``now``; a closed one ends at
    its ``finished_at``, and every phase is cut there.
    """
    finished = _maybe_utc(step.get("finished_at"))
    ending = finished if finished is not None else (_utc(now) if str(step.get("status")) in OPEN else None)
    return [
        {"kind": kind, "from": low, "to": high}
        for kind, low, high in phases.pieces(
            created=_maybe_utc(step.get("created_at")),
            scheduled=_maybe_utc(step.get("scheduled_at")),
            started=_maybe_utc(step.get("started_at")),
            waiting_since=_maybe_utc(step.get("waiting_since")),
            finished=finished,
            ending=ending,
            throttled_until=_maybe_utc(step.get("throttled_until")),
            held=bool(step.get("held")),
        )
        if high > low
    ]


def durations(step: StepRow, *, now: datetime) -> dict[str, float | None]:
    """``{"waited", "throttled", "queued", "ran", "waiting"}`` in seconds; ``None`` for a phase never reached."""
    totals: dict[str, float | None] = dict.fromkeys(PHASES)
    for segment in segments(step, now=now):
        seconds = (segment["to"] - segment["from"]).total_seconds()
        totals[segment["kind"]] = (totals[segment["kind"]] or 0.0) + seconds
    return totals


def paused_periods(events: Iterable[EventRow], *, status: str, now: datetime) -> list[dict[str, datetime]]:
    """``[{"from", "to"}]`` (UTC), oldest first: each ``paused`` event up to the event that ended it.

    A pause ends at the next ``resumed``, ``cancelled`` or ``finished``; a second ``paused``
    inside an open pause changes nothing. A pause still open runs to ``now``, but only while
    the run's ``status`` is ``paused``. ``events`` may come in any order.
    """
    periods: list[dict[str, datetime]] = []
    opened: datetime | None = None
    # A stable sort: events of one instant keep the order they were given in (their ids).
    for event in sorted(events, key=lambda event: _utc(event["created_at"])):
        at, name = _utc(event["created_at"]), str(event["event"])
        if name == EventKind.PAUSED:
            if opened is None:
                opened = at
        elif opened is not None and name in PAUSE_ENDS:
            periods.append({"from": opened, "to": at})
            opened = None
    if opened is not None and str(status) == RunStatus.PAUSED:
        periods.append({"from": opened, "to": _utc(now)})
    return periods


def chart(steps: Iterable[StepRow], events: Iterable[EventRow], *, status: str, now: datetime) -> dict[str, Any]:
    """The range-bar payload: ``{"rows": [...], "paused": [...]}``, JSON-ready.

    One row per attempt, oldest first, labelled ``"name #attempt"``. Each segment has its
    ``kind``, its ``series`` (a key of :data:`SERIES`: the kind, except that a ran phase is
    coloured by how the attempt ended and a child batch's waiting phase is
    ``waiting_children``), ``from``/``to`` in epoch milliseconds and its ``duration`` in
    words for the tooltip; a child batch's waiting phase adds a ``note`` counting them.
    """
    rows = []
    for step in sorted(steps, key=lambda step: (_utc(step["created_at"]), int(step.get("attempt") or 0))):
        rows.append(
            {
                "label": f"{step.get('step_name')} #{step.get('attempt')}",
                "status": _plain(step.get("status")),
                "outcome": _plain(step.get("outcome")),
                "error_class": _plain(step.get("error_class")),
                "segments": [
                    _chart_segment(segment, series_for(segment["kind"], step), note=_note(segment["kind"], step))
                    for segment in segments(step, now=now)
                ],
            }
        )
    paused = [
        _chart_segment({"kind": "paused", **period}, "paused")
        for period in paused_periods(events, status=status, now=now)
    ]
    return {"rows": rows, "paused": paused}


def series_for(kind: str, step: StepRow) -> str:
    """The series (colour) of a phase of ``step``."""
    if kind == "waiting" and step.get("children"):
        return "waiting_children"
    if kind != "ran":
        return kind
    return RAN_SERIES.get(str(step.get("status")), "ran_cancelled")


def legend() -> list[dict[str, str]]:
    """:data:`SERIES` as a JSON-ready list, for the page that draws the chart."""
    return [{"series": name, "colour": colour, "label": label} for name, (colour, label) in SERIES.items()]


def millis(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime, rounded half up (whole numbers, no float error)."""
    microseconds = (moment - _EPOCH) // timedelta(microseconds=1)
    return (microseconds + 500) // 1000


def children_note(children: Mapping[str, int]) -> str:
    """``"waiting for 3 child runs (1 ended)"``: a child batch's count, for people."""
    total = int(children["total"])
    return f"waiting for {total} child run{'' if total == 1 else 's'} ({int(children['ended'])} ended)"


def _note(kind: str, step: StepRow) -> str | None:
    # Only a child batch's waiting phase has more to say than its kind and duration.
    children = step.get("children")
    return children_note(children) if kind == "waiting" and children else None


def _chart_segment(segment: Mapping[str, Any], series: str, *, note: str | None = None) -> dict[str, Any]:
    drawn = {
        "kind": segment["kind"],
        "series": series,
        "from": millis(segment["from"]),
        "to": millis(segment["to"]),
        "duration": duration(segment["to"] - segment["from"]),
    }
    if note is not None:
        drawn["note"] = note
    return drawn


def _utc(moment: datetime) -> datetime:
    # Python compares and subtracts two datetimes of one zone by their wall clocks, which
    # is off by an hour across a DST change; in UTC it is real time.
    if moment.utcoffset() is None:
        raise ValueError(f"the timeline needs aware datetimes, got {moment!r}")
    return moment.astimezone(UTC)


def _maybe_utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else _utc(moment)


def _plain(value: Any) -> Any:
    # A StrEnum status becomes its plain string value; None stays None.
    return None if value is None else str(value)
