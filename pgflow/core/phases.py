"""Where one attempt's time went, from its row's timestamps: the same four phases the
dashboard's timeline draws (``pgflow_dashboard.timeline``), for the engine's own telemetry.

    waited    created_at    -> scheduled_at   the step's wait, or a reattempt's backoff
    throttled scheduled_at  -> throttled_until  due, but held by a limit (limited steps only)
    queued    throttled_until -> started_at   due and let through, no worker had claimed it yet
    ran       started_at    -> finished_at    the body
    waiting   waiting_since -> woken          parked on a signal or a fan-out batch

A signal step woken by its signal was scheduled again at the wake, so its park
(``waiting_since``) comes before its (new) ``scheduled_at``: it waited from its creation to
the park, then waited for the signal until the wake.

Pure: datetimes in, seconds out; a phase not reached is None.
"""

from __future__ import annotations

from datetime import datetime

PHASES = ("waited", "throttled", "queued", "ran", "waiting")


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
    ended at ``finished``; throttled only for an attempt a limit let through (``throttled_until``)."""
    woken = waiting_since is not None and scheduled is not None and waiting_since < scheduled
    let_through = scheduled
    if throttled_until is not None and scheduled is not None:
        let_through = max(scheduled, min(throttled_until, started) if started is not None else throttled_until)
    return {
        "waited": _span(created, waiting_since if woken else scheduled),
        "throttled": _span(scheduled, let_through) if throttled_until is not None else None,
        "queued": _span(let_through, started),
        "ran": _span(started, finished),
        "waiting": _span(waiting_since, scheduled) if woken else None,
    }


def _span(low: datetime | None, high: datetime | None) -> float | None:
    if low is None or high is None:
        return None
    return max(0.0, (high - low).total_seconds())
