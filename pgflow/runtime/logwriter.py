"""The worker's log lines written by one thread of its own, not by the step threads.

A stream handler holds its lock across the write, and the write gives up the GIL: with
dozens of step threads logging, they queue on that lock and hand the GIL back and forth,
and a body's one log line cost the worker as much CPU as the rest of its step
(benchmarks/realistic.py, logs-only). So for as long as the worker runs, each
``logging.StreamHandler`` configured on a logger (file handlers included) is stood in for
by a relay that filters the record in the caller's thread, where a filter may read the
caller's context, and queues a copy with its message rendered; one writer thread emits
those copies through the real handler, in the order they were logged. Handlers of any
other kind (mail, Sentry, a queue of the project's own) are left as they are.

What it costs: a line reaches the file a moment later (``PAUSE``), and a worker killed with
SIGKILL loses the lines still queued. A stop writes them, and so does a relay's ``flush()``,
which ``logging.shutdown()`` calls (the worker's exit that leaves a body running, ``os._exit``).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable

# A line to write; an event the writer sets once every line queued before it is written; or
# the end.
_Item = tuple[logging.Handler, logging.LogRecord] | threading.Event | None


class _Relay(logging.Handler):
    """Stands in for one stream handler on every logger that has it."""

    def __init__(self, target: logging.Handler, lines: queue.SimpleQueue[_Item], drain: Callable[[], None]) -> None:
        super().__init__(target.level)
        self.target = target
        self._plain_filter = type(target).filter is logging.Filterer.filter  # not a filter() of its own
        self._lines = lines
        self._drain = drain

    def handle(self, record: logging.LogRecord) -> bool:
        # Called for every line a step logs: the target's filters are asked only if it has any.
        if self.target.filters or not self._plain_filter:
            verdict = self.target.filter(record)
            if not verdict:
                return False
            if isinstance(verdict, logging.LogRecord):  # a filter may return the record to log (3.12)
                record = verdict
        # A copy, with its message rendered now: the arguments may change once the caller goes
        # on, and the handlers after this one must see the record as it was logged.
        # (Not makeLogRecord: its __init__ reads the clock, the thread and the process again,
        # only to have them overwritten; the copy is a fifth of its cost.)
        line = logging.LogRecord.__new__(logging.LogRecord)
        line.__dict__.update(record.__dict__)
        try:
            line.msg, line.args = record.getMessage(), None
        except Exception:  # noqa: BLE001, S110 - bad arguments: the real handler reports them as it would
            pass
        self._lines.put((self.target, line))
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() never calls it
        self.handle(record)

    def flush(self) -> None:
        """Return once the lines queued so far are written (and flushed by the real handler)."""
        self._drain()
        self.target.flush()


def start() -> Callable[[], None]:
    """Stand relays in for the stream handlers now configured; returns the function that puts
    them back and writes what is still queued (the worker calls it as it stops)."""
    lines: queue.SimpleQueue[_Item] = queue.SimpleQueue()
    writer = threading.Thread(target=_write, args=(lines,), name="pgflow-log-writer", daemon=True)
    relays: dict[logging.Handler, _Relay] = {}

    def drain() -> None:
        if writer.is_alive():
            written = threading.Event()
            lines.put(written)
            written.wait(timeout=10)
        else:  # stopped, or never started: the caller writes what is left
            _write_queued(lines)

    loggers = [logging.getLogger()] + [
        item for item in logging.Logger.manager.loggerDict.values() if isinstance(item, logging.Logger)
    ]
    for each in loggers:
        for index, handler in enumerate(each.handlers):
            if isinstance(handler, logging.StreamHandler):
                each.handlers[index] = relays.setdefault(handler, _Relay(handler, lines, drain))
    if not relays:
        return lambda: None
    writer.start()

    def stop() -> None:
        for each in loggers:
            each.handlers = [relay.target if isinstance(relay, _Relay) else relay for relay in each.handlers]
        lines.put(None)
        writer.join(timeout=10)
        # What a thread queued after the stop mark, between its reading a relay and putting.
        _write_queued(lines)

    return stop


# The lines the writer takes from the queue at once: each handler it wrote to is flushed once
# per batch, not once per line, and a line waits at most a batch.
BATCH = 256
# How long the writer rests after each batch while the worker logs. Each time it woke for a
# line, and each line's write (a stream such as sys.stderr writes at every newline), gave the
# GIL up and took it back: in a busy worker a thread switch for every line or two, which cost
# more than formatting the line (benchmarks/RESULTS.md, issue 35 part P). Resting, it takes the
# lines logged meanwhile as one batch and writes each stream's run of lines at once. A line
# logged while the writer waits is written at once; under load, at most this much later.
PAUSE = 0.02


def _write(lines: queue.SimpleQueue[_Item]) -> None:
    while True:
        batch = [lines.get()]
        while len(batch) < BATCH and not lines.empty():
            batch.append(lines.get())
        if not _write_batch(batch):
            return
        if len(batch) < BATCH:  # caught up: rest (behind, it writes on without resting)
            time.sleep(PAUSE)


def _write_queued(lines: queue.SimpleQueue[_Item]) -> None:
    batch = []
    while not lines.empty():
        batch.append(lines.get())
    _write_batch([item for item in batch if item is not None])


def _write_batch(batch: list[_Item]) -> bool:
    """Write ``batch`` in order, flushing each handler written to before an event is set and
    at the end. False: it held the end (what follows it is left to ``_write_queued``)."""
    written: dict[logging.Handler, None] = {}  # in order of first write
    run = _Run()
    for item in batch:
        if isinstance(item, tuple):
            target, record = item
            if run.target is not target:
                run.write(written)
            if _writes_to_stream(target):
                run.add(target, record)
            else:
                _emit(target, record)
            continue
        run.write(written)
        _flush(written)
        if item is None:
            return False
        item.set()
    run.write(written)
    _flush(written)
    return True


def _flush(written: dict[logging.Handler, None]) -> None:
    for target in written:
        with contextlib.suppress(Exception):  # a stream that cannot flush: no one line to report it for
            target.flush()
    written.clear()


# Handlers whose emit() is the stream write and flush of logging's own: the writer formats
# their lines, writes each run of them at once and flushes once per batch. Any other
# handler's emit() is called as it is.
_STREAM_EMITS = (logging.StreamHandler.emit, logging.FileHandler.emit)


def _writes_to_stream(target: logging.Handler) -> bool:
    # A FileHandler opened with delay=True has no stream until its first emit() opens it.
    return type(target).emit in _STREAM_EMITS and getattr(target, "stream", None) is not None


class _Run:
    """Consecutive lines for one stream handler, formatted, written with one write. Only
    consecutive ones: two handlers may share a stream, and the lines keep the order logged."""

    def __init__(self) -> None:
        self.target: logging.Handler | None = None
        self.texts: list[str] = []
        self.last: logging.LogRecord | None = None  # the record a failed write is reported for

    def add(self, target: logging.Handler, record: logging.LogRecord) -> None:
        # Filtered already, by the relay: formatting under the lock, as emit() does, and the
        # write are all that is left of handle().
        self.target = target
        target.acquire()
        try:
            self.texts.append(target.format(record) + target.terminator)  # type: ignore[attr-defined]
            self.last = record
        except Exception:  # noqa: BLE001 - a line that cannot be formatted is reported, the others written
            with contextlib.suppress(Exception):
                target.handleError(record)
        finally:
            target.release()

    def write(self, written: dict[logging.Handler, None]) -> None:
        target, texts, last = self.target, self.texts, self.last
        self.target, self.texts, self.last = None, [], None
        if target is None or not texts:
            return
        target.acquire()
        try:
            target.stream.write("".join(texts))  # type: ignore[attr-defined]
            written[target] = None
        except Exception:  # noqa: BLE001 - a stream that cannot be written must not stop the writer
            with contextlib.suppress(Exception):
                target.handleError(last)  # type: ignore[arg-type]
        finally:
            target.release()


def _emit(target: logging.Handler, record: logging.LogRecord) -> None:
    """Emit ``record`` through a handler that is not a plain stream handler."""
    # Filtered already, by the relay: the lock and the emit are all that is left of handle().
    target.acquire()
    try:
        target.emit(record)
    except Exception:  # noqa: BLE001 - a handler that raises must not stop the writer: lines would pile up
        with contextlib.suppress(Exception):
            target.handleError(record)
    finally:
        target.release()
