"""The worker's log writer: the step threads' lines reach the real handlers, in order, as logged."""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from pgflow.runtime import logwriter

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class _Tags(logging.Filter):
    """Reads the caller's context, as a project's request-id filter does."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return not str(record.msg).startswith("drop")


class _Recording(io.StringIO):
    """A stream that notes which threads wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writers: set[str] = set()

    def write(self, text: str) -> int:
        self.writers.add(threading.current_thread().name)
        return super().write(text)


class _Kept(logging.Handler):
    """Not a stream handler: left in place, sees every record as it was logged."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, io.StringIO, logging.StreamHandler, _Kept]]:
    out = io.StringIO()
    stream = logging.StreamHandler(out)
    stream.setFormatter(logging.Formatter("%(threadName)s %(request_id)s %(message)s"))
    stream.addFilter(_Tags())
    kept = _Kept()
    log = logging.getLogger("tests.logwriter")
    log.handlers = [stream, kept]
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, out, stream, kept
    log.handlers = []


def test_lines_written_by_one_thread_in_order_with_their_callers_context(logger) -> None:
    log, out, stream, kept = logger
    stop = logwriter.start()
    assert log.handlers[0] is not stream and log.handlers[1] is kept  # only the stream handler stood in for
    writer = [t for t in threading.enumerate() if t.name == "pgflow-log-writer"]
    assert writer, "no writer thread"

    def body(name: str) -> None:
        request_id.set(name)
        for index in range(200):
            log.info("%s line %d", name, index)
        log.info("drop this one")

    threads = [threading.Thread(target=body, args=(f"t{n}",), name=f"t{n}") for n in range(8)]
    recording = _Recording()
    stream.setStream(recording)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The writer writes them while the worker runs, not only the stop: wait for every line.
    deadline = time.monotonic() + 10
    while recording.getvalue().count("\n") < 8 * 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recording.writers == {"pgflow-log-writer"}, recording.writers
    out.write(recording.getvalue())
    stop()
    # Put back (pytest's own capture handlers may follow them).
    assert log.handlers[:2] == [stream, kept]
    assert not [h for h in logging.getLogger().handlers + log.handlers if type(h).__name__ == "_Relay"]
    lines = out.getvalue().splitlines()
    assert len(lines) == 8 * 200
    for n in range(8):
        own = [line for line in lines if line.startswith(f"t{n} ")]
        # The filter ran in the caller's thread, so it saw the caller's request id.
        assert own == [f"t{n} t{n} t{n} line {index}" for index in range(200)]
    # The other handler saw the records as logged: template and arguments apart.
    assert {(record.msg, len(record.args or ())) for record in kept.records} == {
        ("%s line %d", 2),
        ("drop this one", 0),
    }


def test_the_message_is_rendered_when_logged_not_when_written(logger) -> None:
    log, out, _, _ = logger
    stop = logwriter.start()
    order = {"items": 1}
    log.info("order %s", order)
    order["items"] = 2  # the caller goes on before the writer thread writes
    stop()
    assert out.getvalue().splitlines() == ["MainThread - order {'items': 1}"]


def test_a_bad_argument_is_reported_by_the_real_handler(logger, capsys) -> None:
    log, out, _, _ = logger
    stop = logwriter.start()
    log.info("%d apples", "many")
    log.info("after it")
    stop()
    assert out.getvalue().splitlines() == ["MainThread - after it"]
    assert "%d format: a real number is required" in capsys.readouterr().err


def test_nothing_to_stand_in_for() -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    root.handlers = [h for h in before if not isinstance(h, logging.StreamHandler)]
    saved = {
        name: list(item.handlers)
        for name, item in logging.Logger.manager.loggerDict.items()
        if isinstance(item, logging.Logger)
    }
    try:
        for name in saved:
            logging.getLogger(name).handlers = [h for h in saved[name] if not isinstance(h, logging.StreamHandler)]
        threads = threading.active_count()
        stop = logwriter.start()
        assert threading.active_count() == threads  # no writer thread for nothing
        stop()
    finally:
        root.handlers = before
        for name, handlers in saved.items():
            logging.getLogger(name).handlers = handlers


class _SlowStream(logging.StreamHandler):
    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(0.002)  # a slow disk: the lines queue up behind the writer
        super().emit(record)


def test_stop_writes_every_line_still_queued() -> None:
    out = io.StringIO()
    log = logging.getLogger("tests.logwriter.slow")
    log.handlers, log.propagate = [_SlowStream(out)], False
    log.setLevel(logging.INFO)
    try:
        stop = logwriter.start()
        for index in range(100):
            log.info("line %d", index)
        stop()
        assert out.getvalue().splitlines() == [f"line {index}" for index in range(100)]
    finally:
        log.handlers = []


def test_a_flush_writes_what_is_queued_as_logging_shutdown_asks() -> None:
    # The worker that leaves a body running exits through logging.shutdown() and os._exit:
    # shutdown() flushes every handler, the relays too, and no stop() runs.
    out = io.StringIO()
    log = logging.getLogger("tests.logwriter.flush")
    log.handlers, log.propagate = [_SlowStream(out)], False
    log.setLevel(logging.INFO)
    stop = logwriter.start()
    try:
        for index in range(50):
            log.info("line %d", index)
        log.handlers[0].flush()
        assert out.getvalue().splitlines() == [f"line {index}" for index in range(50)]
    finally:
        stop()
        log.handlers = []


class _Counted(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = self.flushes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


class _Gate(logging.StreamHandler):
    """A stream handler with an emit of its own (called as it is): holds the writer on its
    first line until released, so the lines after it queue up."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.opened = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.opened.wait(5)


@contextlib.contextmanager
def _held_writer(*handlers: logging.Handler) -> Iterator[list[logging.Logger]]:
    """One logger per handler, each logging INFO to it alone, with the writer started and
    held on its first line (a gate) until the block ends: the lines logged in the block queue
    up and are written together. Stopped, and the loggers emptied, on the way out."""
    gate = _Gate()
    loggers = [logging.getLogger(f"tests.logwriter.held{index}") for index in range(len(handlers) + 1)]
    for each, handler in zip(loggers, [gate, *handlers], strict=True):
        each.handlers, each.propagate = [handler], False
        each.setLevel(logging.INFO)
    try:
        stop = logwriter.start()
        loggers[0].info("hold the writer")
        yield loggers[1:]
        gate.opened.set()
        stop()
    finally:
        for each in loggers:
            each.handlers = []


def test_lines_queued_together_are_written_in_order_with_one_write_and_flush_per_batch() -> None:
    # A line-buffered stream (sys.stderr) makes a system call of each write with a newline.
    out = _Counted()
    with _held_writer(logging.StreamHandler(out)) as (log,):
        for index in range(100):
            log.info("line %d", index)
    assert out.getvalue().splitlines() == [f"line {index}" for index in range(100)]
    assert 1 <= out.writes < 10, out.writes  # once per batch, not once per line
    assert 1 <= out.flushes < 10, out.flushes


def test_two_handlers_on_one_stream_keep_the_order_their_lines_were_logged_in() -> None:
    out = io.StringIO()
    with _held_writer(logging.StreamHandler(out), logging.StreamHandler(out)) as (first, second):
        for index in range(30):
            (first if index % 3 else second).info("line %d", index)
    assert out.getvalue().splitlines() == [f"line {index}" for index in range(30)]


class _Refusing(io.StringIO):
    """A stream whose first write fails, as a full disk's would."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = False

    def write(self, text: str) -> int:
        if not self.refused:
            self.refused = True
            raise OSError(28, "No space left on device")
        return super().write(text)


def test_a_write_that_fails_is_reported_and_the_writer_goes_on(capsys) -> None:
    out = _Refusing()
    with _held_writer(logging.StreamHandler(out)) as (log,):
        log.info("lost with the failed write")
    assert "No space left on device" in capsys.readouterr().err  # the handler's handleError()
    with _held_writer(logging.StreamHandler(out)) as (log,):
        log.info("written after it")
    assert out.getvalue().splitlines() == ["written after it"]
