"""Where one attempt's time went, from its row's timestamps: the one rule for an attempt's
phases, read by the dashboard's timeline (``pgflow_dashboard.timeline``), the MCP's reads,
the alert rules (``core.alerting.PHASES``), the engine's traces and metrics and the insights
command (``ROLLED``). The rollup (``pgflow.rollup``) splits attempts the same way in SQL,
checked against :func:`pieces` by ``tests/integration/test_insights.py``.

    waited    created_at      -> scheduled_at     the step's wait, or a reattempt's backoff
    throttled scheduled_at    -> throttled_until  due, but held by a limit (limited steps only)
    queued    throttled_until -> started_at       due and let through, no worker had claimed it yet
    ran       started_at      -> finished_at      the body
    waiting   waiting_since   -> woken            parked on a signal or a fan-out batch

A signal step woken by its signal was scheduled again at the wake, so its park
(``waiting_since``) comes before its (new) ``scheduled_at``: it waited from its creation to
the park, then waited for the signal until the wake. A step parked after its body (a
signal not there yet, a fan-out batch open) ran up to the park and waits from there.

Pure: datetimes in, datetimes or seconds out; a phase not reached is left out (None).
"""

from __future__ import annotations

from datetime import datetime

PHASES = ("waited", "throttled", "queued", "ran", "waiting")  # in the order an attempt can go through them
# The phases the rollup keeps a histogram of (``StepRollup``'s columns): a wait on a signal
# or a batch is read live by the alerts, not rolled.
ROLLED = ("waited", "throttled", "queued", "ran")

Piece = tuple[str, datetime, datetime]  # (phase, from, to)


def pieces(
    *,
    created: datetime | None,
    scheduled: datetime | None,
    started: datetime | None,
    waiting_since: datetime | None,
    finished: datetime | None,
    ending: datetime | None,
    throttled_until: datetime | None = None,
    held: bool = False,
) -> list[Piece]:
    """The attempt's phases in time order, each cut at ``finished`` (a step cancelled before
    its scheduled_at did not wait past its end); a phase with an end missing is left out,
    one of no length is kept. ``ending`` is where an open phase ends: ``finished``, or now
    for an attempt still open. ``held``: due, unclaimed and held by a full gate now (the
    run page reads the gate rows), so throttled up to ``ending``."""
    limited = throttled_until is not None or (started is None and held)
    let_through = _let_through(scheduled, started, throttled_until, held, ending)
    throttled = (scheduled, let_through) if limited else (None, None)
    if waiting_since is not None and scheduled is not None and waiting_since < scheduled:
        # Woken by its signal: the row was scheduled again at the wake and claimed a second
        # time, so the park came before the (new) scheduled_at.
        spans = [
            ("waited", created, waiting_since),
            ("waiting", waiting_since, scheduled),
            ("throttled", *throttled),
            ("queued", let_through, started),
            ("ran", started, ending),
        ]
    elif waiting_since is not None:
        # Parked after the body ran.
        spans = [
            ("waited", created, scheduled),
            ("throttled", *throttled),
            ("queued", let_through, started),
            ("ran", started, waiting_since),
            ("waiting", waiting_since, ending),
        ]
    else:
        spans = [
            ("waited", created, scheduled),
            ("throttled", *throttled),
            ("queued", let_through, started if started is not None else ending),
            ("ran", started, ending),
        ]
    kept: list[Piece] = []
    for phase, low, high in spans:
        if low is None or high is None:
            continue
        kept.append((phase, low, high if finished is None or high <= finished else finished))
    return kept


def _let_through(
    scheduled: datetime | None,
    started: datetime | None,
    throttled_until: datetime | None,
    held: bool,
    ending: datetime | None,
) -> datetime | None:
    # When a limit let the due attempt through: its throttled_until once claimed (between its
    # scheduled_at and its start: the claim's clock and the finisher's may differ); while
    # unclaimed and held by a full gate, the open end; else its scheduled_at (no throttled phase).
    if throttled_until is not None and scheduled is not None:
        return max(scheduled, min(throttled_until, started) if started is not None else throttled_until)
    if started is None and held:
        return ending
    return scheduled


def of_attempt(
    *,
    created: datetime | None,
    scheduled: datetime | None,
    started: datetime | None,
    waiting_since: datetime | None,
    finished: datetime | None,
    throttled_until: datetime | None = None,
) -> dict[str, float | None]:
    """``{"waited", "throttled", "queued", "ran", "waiting"}`` in seconds for an attempt that
    ended at ``finished`` (:func:`pieces`; a phase of no length is 0, one not reached None);
    throttled only for an attempt a limit let through (``throttled_until``)."""
    totals: dict[str, float | None] = dict.fromkeys(PHASES)
    for phase, low, high in pieces(
        created=created,
        scheduled=scheduled,
        started=started,
        waiting_since=waiting_since,
        finished=finished,
        ending=finished,
        throttled_until=throttled_until,
    ):
        totals[phase] = (totals[phase] or 0.0) + max(0.0, (high - low).total_seconds())
    return totals
