"""The one writer of run, step, event, signal and batch rows.

Every transition happens here, once, in a short transaction that holds the run's row lock
(``SELECT … FOR UPDATE`` on ``pgflow_run``) and, for a claimed attempt, checks its claim
token: a worker whose lease was taken over can apply nothing, however late it wakes.
Each transition writes its ``Event`` in the same transaction. NOTIFY is sent inside the
transaction, so PostgreSQL delivers it on commit and drops it on rollback.

One module per concept:

- ``locking``: the run lock, the audit trail's writer, NOTIFY;
- ``starting``: a new run and its first attempt;
- ``scheduling``: the next attempt, and which step that is;
- ``transitions``: ``apply`` (an attempt's end becomes the run's next state), park and wake;
- ``claims``: taking due attempts: the claim statements and what a claim returns;
- ``leases``: holding and losing them: heartbeat, hand back, the claim-token check, a lost
  lease or connection;
- ``rows``: the rows the claim, the plain start and the group commit build and read
  without the ORM's per-instance cost;
- ``attempts``: one claimed attempt's ``prepare`` before its body and ``finish`` after;
- ``commit``: the worker's group commit (``finish_many``);
- ``controls``: the operator's pause, resume, cancel and skip;
- ``mailbox``: signals stored, taken and timed out;
- ``decisions``: an approval's votes and its decision, stored as signals;
- ``batches``: a fan-out's batch opened, its members counted, its step resolved;
- ``rerun``: a run re-run from one of its steps;
- ``children``: child runs as a fan-out's members, counted when they end;
- ``links``: a run held while a link to it is written (the links are not foreign keys);
- ``retention``: old runs deleted.

Callers outside pgflow use the models' methods (``run.pause()`` …), ``Workflow.start()`` and
``pgflow.signal()``; the worker uses ``claim``/``prepare``/``finish``. Modules outside this
package use only the names below.
"""

from __future__ import annotations

from .attempts import Prepared, finish, prepare, quick_prepare
from .batches import count_member, mark_enqueued, open_batch, resolve_batch_step, skip_member
from .children import repair_children
from .claims import NOT_KNOWN, Claim, Claimed, claim, claim_notified, claim_step, next_due
from .commit import Finished, finish_many
from .controls import cancel, pause, resume, skip_step
from .decisions import record_vote
from .leases import hand_back, heartbeat, log_ignored, recover_lost
from .links import hold_run
from .locking import CHANNEL, TESTING_WORKER, actor_name, notify, now, read_note
from .mailbox import deliver, time_out, wake_stale
from .rerun import rerun_from, rerun_plan
from .retention import purge_runs
from .scheduling import outputs_of_runs
from .starting import created, start_run

# Exactly the names used outside the store (tests/unit/test_store_exports.py reads the
# sources and fails on a name missing here or listed and unused).
__all__ = [
    "CHANNEL",
    "NOT_KNOWN",
    "TESTING_WORKER",
    "Claim",
    "Claimed",
    "Finished",
    "Prepared",
    "actor_name",
    "cancel",
    "claim",
    "claim_notified",
    "claim_step",
    "count_member",
    "deliver",
    "finish",
    "finish_many",
    "hand_back",
    "heartbeat",
    "hold_run",
    "log_ignored",
    "mark_enqueued",
    "next_due",
    "notify",
    "now",
    "open_batch",
    "outputs_of_runs",
    "pause",
    "prepare",
    "purge_runs",
    "quick_prepare",
    "read_note",
    "record_vote",
    "recover_lost",
    "repair_children",
    "rerun_from",
    "rerun_plan",
    "resolve_batch_step",
    "resume",
    "skip_member",
    "skip_step",
    "start_run",
    "created",
    "time_out",
    "wake_stale",
]
