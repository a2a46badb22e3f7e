"""Fan-out: a step that hands a group of django-q2 tasks out and waits for them as one batch.

Stored django-q2 rows name ``pgflow.fanout.member_hook`` and ``pgflow.fanout.run_member``
(``HOOK``, ``RUNNER``): those paths must keep importing, so they are re-exported here.
"""

from __future__ import annotations

from .djangoq import (
    CALLBACK_MESSAGE,
    HOOK,
    INLINE_WORKER,
    RUNNER,
    BatchBuilder,
    Member,
    execute,
    failure_is_final,
    member_finished,
    member_function,
    member_hook,
    open_batch,
    repair_lost,
    resolve_step,
    run_inline,
    run_member,
    stuck_after,
    task_name,
    task_path,
)

__all__ = [
    "CALLBACK_MESSAGE",
    "HOOK",
    "INLINE_WORKER",
    "RUNNER",
    "BatchBuilder",
    "Member",
    "execute",
    "failure_is_final",
    "member_finished",
    "member_function",
    "member_hook",
    "open_batch",
    "repair_lost",
    "resolve_step",
    "run_inline",
    "run_member",
    "stuck_after",
    "task_name",
    "task_path",
]
