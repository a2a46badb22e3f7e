"""Fan-out: a step that hands a group of django-q2 tasks out and waits for them as one batch.

    @fan_out(on_batch_failure="pause")
    def notify_vendors(self, batch):
        for vendor_id in self.input["vendors"]:
            batch.add("shop.tasks.notify_vendor", vendor_id)

1. The body (in the worker, outside any transaction) gets a :class:`BatchBuilder` that only
   records its ``add`` calls. A flow-control verb or an exception in the body ends the step
   before any batch exists.
2. Open (one transaction, under the run's lock): the ``Batch`` row, one ``BatchMember`` per
   task, the step parked ``waiting`` on the batch and ``fan_out_opened``. The django-q2 tasks
   are enqueued only once that commits, so a task never runs for a batch a rollback undid.
   An empty batch finishes and completes the step right there.
3. Count: every member task carries :func:`member_hook` as its django-q2 result hook. A
   member counts once, when its task ends for good: it succeeded, or it failed and django-q2
   will not run it again. The member that brings the count to the total wins the batch (a
   conditional UPDATE, so exactly one of two members finishing together does).
4. Resolve (the winner, under the run's lock): no failure completes the step and advances;
   any failure applies the step's ``on_batch_failure`` with ``FanOutFailed`` recorded. A step
   no longer waiting (skipped, cancelled, paused by an operator) is left alone.
5. The sweep (:func:`repair_lost`) resolves what a lost callback left behind.

A reattempt or a resume of a fan_out runs the body again and opens a fresh batch, and
django-q2 may run a task more than once: member tasks must be idempotent.

The package, one module per concept:

- ``builder``: the ``batch`` a body gets (``BatchBuilder``, ``Member``) and the checks on
  what it adds;
- ``djangoq``: the step's run (``execute``, ``open_batch``), the django-q2 glue (``enqueue``,
  ``run_member``) and the counting hook (``member_hook``, ``member_finished``, ``resolve_step``);
- ``repairs``: the sweep's repairs (``repair_lost``).

The inline runner ``pgflow.testing.run_workflow`` uses lives in ``pgflow.testing``. Stored
django-q2 rows name ``pgflow.fanout.member_hook`` and ``pgflow.fanout.run_member`` (``HOOK``,
``RUNNER``): those paths must keep importing, hence the re-exports below.
"""

from __future__ import annotations

from .builder import CALLBACK_MESSAGE, BatchBuilder, Member, task_path
from .djangoq import (
    HOOK,
    RUNNER,
    enqueue,
    execute,
    failure_is_final,
    member_finished,
    member_function,
    member_hook,
    open_batch,
    resolve_step,
    run_member,
    task_name,
)
from .repairs import INLINE_WORKER, repair_lost, stuck_after

__all__ = [
    "CALLBACK_MESSAGE",
    "HOOK",
    "INLINE_WORKER",
    "RUNNER",
    "BatchBuilder",
    "Member",
    "enqueue",
    "execute",
    "failure_is_final",
    "member_finished",
    "member_function",
    "member_hook",
    "open_batch",
    "repair_lost",
    "resolve_step",
    "run_member",
    "stuck_after",
    "task_name",
    "task_path",
]
