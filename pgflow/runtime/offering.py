"""One worker's offer of a slot to the starts (pgflow.store.offers), as its claim loop keeps it.

The loop offers a slot when it is idle (nothing due, no attempt held) and goes to sleep,
and reserves that slot while the offer stands: its claims take for the other slots. A start
that takes the offer inserts its attempt claimed by this worker and says so in its
notification (``note``); the loop runs it in the reserved slot. The loop withdraws the offer
before it needs the reserved slot (a claim that would otherwise take nothing, a backlog) and
when it stops. The slot is reserved in two states:

- ``standing``: our row is in ``pgflow_offer``, until ``until``;
- ``expecting``: a start took it (a renewal or a withdraw found no row of ours), and its
  notification has not been read yet. It comes right after, on the same session; if it has
  not within ``EXPECT`` (a twin with our ``--name`` replaced our row), the slot is free
  again, and an attempt handed meanwhile waits for its lease.

When the session that made the offer ends (a reconnect: a silent socket, a restart), a start
may have taken the offer and its notification gone with the session: the next ``take``
settles it (``store.offers.settle``), withdrawing the offer if it still stands and adopting
what was handed to it otherwise, so such an attempt runs at once, not after its lease.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from datetime import datetime, timedelta
from typing import Any

from ..store import Claim
from ..store import offers as store_offers
from ..store.claims import Kinds

logger = logging.getLogger("pgflow")

# An offer stands this long past the loop's next wake at the latest, which renews it: a
# worker cut off from the database renews none, and starts pass its offer over after this.
SLACK = timedelta(seconds=2)
EXPECT = 2.0  # seconds a taken offer's slot waits for its attempt's notification
ADOPTED_KEPT = 1000  # ids of attempts adopted after a lost session, whose notification may still come


class Offering:
    """The offer of worker ``worker`` on ``queues``, and the attempts starts handed to it."""

    def __init__(self, *, worker: str, queues: list[str], enabled: bool) -> None:
        self.worker = worker
        self.queues = queues
        self.enabled = enabled
        self.until: datetime | None = None
        self.session: int | None = None  # the backend pid the offer was made on
        self._since: datetime | None = None  # when the offer on that session was made
        self._expecting_until: float | None = None  # monotonic
        self.handed: list[store_offers.Handed] = []
        # A lost session's offer to settle: (its backend pid, when it was made).
        self.settling: tuple[int, datetime] | None = None
        self._adopted: deque[int] = deque(maxlen=ADOPTED_KEPT)

    @property
    def expecting(self) -> bool:
        if self._expecting_until is None:
            return False
        if time.monotonic() < self._expecting_until:
            return True
        self._expecting_until = None
        logger.info(
            "worker %s: the attempt a start took its offered slot for did not come within %.0fs; "
            "if one was handed, it runs again after its lease",
            self.worker,
            EXPECT,
            extra={"action": "hand_off_missed"},
        )
        return False

    @property
    def reserving(self) -> bool:
        return self.until is not None or self.expecting

    def reserve(self, free: Kinds) -> Kinds:
        """``free`` less the reserved slot (one of each kind) while an offer holds it."""
        if not self.reserving:
            return free
        return Kinds(
            threads=max(0, free.threads - 1),
            awaiting=max(0, free.awaiting - 1) if free.async_steps else free.awaiting,
            async_steps=free.async_steps,
            readers=free.readers,
        )

    def note(self, handed: store_offers.Handed) -> bool:
        """A notification handed an attempt to ``handed.worker``: True if to this one's offer
        (our slot is the attempt's now), False if to another worker's (claimed: not ours)."""
        if handed.worker != self.worker or handed.session != self.session:
            return False
        if handed.step_id not in self._adopted:
            self.handed.append(handed)
        self.until = None
        self._expecting_until = None
        return True

    def make(self, *, free: Kinds, wait: float, now: datetime) -> None:
        """Before a sleep of ``wait`` seconds, idle: offer a slot (``free`` has one of each
        kind) or renew the standing offer, so that it stands until past the next wake."""
        if not self.enabled or self.handed or self.expecting or self.settling:
            return
        if free.threads < 1 or (free.async_steps and free.awaiting < 1):
            return
        until = now + timedelta(seconds=wait) + 2 * SLACK
        if self.until is None:
            # Set before the statement: a start may take the offer the moment it commits, and
            # its notification be read with the statement's answer (``note`` checks the session).
            self.session = store_offers.session()
            self.until, self._since = until, now
            if not store_offers.offer(worker=self.worker, queues=self.queues, until=until):
                self.until = None  # offered at the next idle wake
        elif self.until < now + timedelta(seconds=wait) + SLACK:
            if not store_offers.renew(worker=self.worker, until=until):
                self._taken()
            elif self.until is not None:  # not taken while we renewed it
                self.until = until

    def withdraw(self) -> bool:
        """Take the standing offer back. True: the reserved slot is free again; False: a start
        took the offer and its attempt is on its way."""
        if self.until is None:
            return not self.reserving
        self.until = None
        if store_offers.withdraw(worker=self.worker):
            return True
        self._taken()
        return False

    def _taken(self) -> None:
        self.until = None
        if not self.handed:  # its notification may have come while we asked
            self._expecting_until = time.monotonic() + EXPECT

    def session_ended(self) -> None:
        """The session that made the offer is gone, and with it any notification still on its
        way: the next ``take`` settles the offer on the new session."""
        if (self.until is not None or self._expecting_until is not None) and self.session is not None:
            assert self._since is not None
            self.settling = (self.session, self._since)
        self.until = None
        self._expecting_until = None

    def stop_offering(self, raw: Any) -> None:
        """The worker stops listening on ``raw`` (its psycopg connection): the session lets
        its offer mark go (``store.offers.unmark``), leaving the connection as it found it."""
        store_offers.unmark(raw)

    def take(self, *, held: list[Claim], readers: frozenset[str]) -> list[Claim]:
        """The claims handed to this worker since the last call, reading those a notification
        could not carry (None read: its lease brings it back)."""
        handed, self.handed = self.handed, []
        tokens = {claim.token for claim in held}
        claims: list[Claim] = []
        for item in handed:
            if item.token in tokens:
                continue
            claim = item.claim if item.claim is not None else store_offers.fetch(item, readers=readers)
            if claim is not None:
                claims.append(claim)
        if self.settling is not None:
            session, since = self.settling
            ids = [claim.step_id for claim in (*held, *claims)]
            adopted = store_offers.settle(worker=self.worker, session=session, since=since, held=ids, readers=readers)
            self.settling = None
            if adopted:
                logger.info(
                    "worker %s adopts %d attempts handed to it before its session ended",
                    self.worker,
                    len(adopted),
                    extra={"action": "hand_off_adopted"},
                )
            self._adopted.extend(claim.step_id for claim in adopted)
            claims.extend(adopted)
        return claims


def handed_in(payload_rest: str, step_id: int | None) -> store_offers.Handed | None:
    """The hand-off a notification's rest carries (``store.read_note``), if any."""
    if not payload_rest or step_id is None:
        return None
    return store_offers.read_handed(step_id, payload_rest)
