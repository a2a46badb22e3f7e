"""runtime/slots.py: the worker's step threads report each item's result or error once, and
their feed starts every parked thread a burst needs."""

from __future__ import annotations

import threading
import time

from pgflow.runtime.slots import Feed, Slots


def test_each_item_is_reported_once_with_its_result_or_its_error():
    reported: list[tuple[int, int | None, str | None]] = []
    lock = threading.Lock()

    def run(item: int) -> int:
        if item % 5 == 0:
            raise SystemExit(f"body {item} exited")  # a BaseException is reported, not lost
        return item * 2

    def done(item: int, result: int | None, exc: BaseException | None) -> None:
        with lock:
            reported.append((item, result, None if exc is None else str(exc)))

    slots: Slots[int, int] = Slots(4, run, done, name="test-slot")
    for item in range(1, 41):
        slots.submit(item)
    slots.shutdown(wait=True)  # each thread stops after the items queued before it
    assert sorted(reported) == [
        (item, None, f"body {item} exited") if item % 5 == 0 else (item, item * 2, None) for item in range(1, 41)
    ]
    assert not [t for t in threading.enumerate() if t.name.startswith("test-slot")]


def test_a_report_that_raises_is_logged_and_the_thread_serves_on(caplog):
    reported: list[int] = []

    def done(item: int, result: int | None, exc: BaseException | None) -> None:
        if item == 1:
            raise RuntimeError("the report of item 1 broke")
        reported.append(item)

    slots: Slots[int, int] = Slots(1, lambda item: item, done, name="test-slot-report")
    for item in (1, 2, 3):
        slots.submit(item)
    slots.shutdown(wait=True)
    assert reported == [2, 3]  # the one thread ran on after the failed report
    assert "reporting a finished step failed" in caplog.text
    assert "the report of item 1 broke" in caplog.text


def test_a_burst_of_items_starts_every_parked_thread():
    # Each body waits until all four run at once: the burst must wake the parked threads one
    # after another, not leave items waiting for a thread that is busy.
    together = threading.Barrier(4, timeout=5)
    ran: list[int] = []
    all_reported = threading.Event()

    def report(item: int, result: int | None, exc: BaseException | None) -> None:
        ran.append(item if exc is None else -item)
        if len(ran) == 8:
            all_reported.set()

    def run(item: int) -> int:
        together.wait()
        return item

    slots: Slots[int, int] = Slots(4, run, report, name="test-slot-burst")
    for item in range(1, 9):  # two bursts' worth: the second four find the threads running
        slots.submit(item)
    assert all_reported.wait(timeout=30)
    slots.shutdown(wait=False)  # a thread left parked would never join
    assert sorted(ran) == list(range(1, 9))


def test_a_feed_gives_items_in_order_and_parks_until_one_comes():
    feed: Feed[int] = Feed()
    for item in (1, 2, 3):
        feed.put(item)
    assert [feed.get() for _ in range(3)] == [1, 2, 3]

    got: list[int] = []

    def take_two() -> None:
        for _ in range(2):
            got.append(feed.get())

    taker = threading.Thread(target=take_two, daemon=True)
    taker.start()
    locks = []
    for item in (4, 5):  # the thread parks twice, on the same lock of its own
        locks.append(_parked(feed))
        assert len(got) == item - 4  # parked: nothing to take
        feed.put(item)
    taker.join(timeout=10)
    assert got == [4, 5]
    assert locks[0] is locks[1]


def _parked(feed: Feed[int]) -> threading.Lock:
    """The lock of the one thread parked on ``feed``, once it has parked."""
    deadline = time.monotonic() + 10
    while not feed._parked:
        assert time.monotonic() < deadline, "the thread never parked"
        time.sleep(0.001)
    (lock,) = feed._parked
    return lock
