"""The columns of an attempt (a ``pgflow_step`` row) that its readers show: one list, so that
a column the run page gains reaches ``manage.py pgflow show`` and the MCP's ``get_run`` too.

The run page (``pgflow_dashboard.runpage``) reads all of them; ``pgflow show``
(``pgflow.cli.show``) and the MCP each leave out the row's bookkeeping the page needs for
its own drawing (see ``NOT_SHOWN``). Names only: pure, no Django.
"""

from __future__ import annotations

# An attempt's flow control: its gates and when a limit let it through.
GATE_FIELDS = ("run_id", "gate", "gate_max", "rate_gate", "rate_limit", "rate_per", "throttled_until")

ERROR_FIELDS = ("error_class", "error_message", "error_backtrace", "error_causes")

# The columns the run page's step table and timeline read.
STEP_FIELDS = (
    "id",
    "step_name",
    "attempt",
    "status",
    "outcome",
    "queue",
    "priority",
    "created_at",
    "scheduled_at",
    "started_at",
    "finished_at",
    "waiting_since",
    "deadline_at",
    "worker",
    "lease_expires_at",
    "output",
    *ERROR_FIELDS,
    "batch_id",
    "signal_id",
    *GATE_FIELDS,
)

# What the page reads only to draw: the lease (its "lease expires" hint), the signal row (a
# link) and the gates' keys (the page names who holds an attempt back; a text or JSON reader
# needs only when it was let through, ``throttled_until``).
NOT_SHOWN = frozenset({"lease_expires_at", "signal_id", *(name for name in GATE_FIELDS if name != "throttled_until")})
