"""runtime/wake.py: the claim loop's wake-up call (a flag and a pipe, waited on beside a socket)."""

from __future__ import annotations

import os
import socket
import threading
import time

from pgflow.runtime.wake import Wake


def test_a_wait_returns_at_once_when_set_and_after_its_timeout_when_not():
    wake = Wake()
    try:
        started = time.monotonic()
        assert wake.wait(0.05) is False
        assert time.monotonic() - started >= 0.04
        wake.set()
        assert wake.is_set() and wake.wait(5) is True
        wake.clear()
        assert not wake.is_set() and wake.wait(0) is False  # the pipe was drained too
    finally:
        wake.close()


def test_a_set_from_another_thread_ends_a_wait():
    wake = Wake()
    try:
        threading.Timer(0.05, wake.set).start()
        started = time.monotonic()
        assert wake.wait(5) is True
        assert time.monotonic() - started < 2
    finally:
        wake.close()


def test_a_readable_socket_ends_a_wait_without_setting_the_flag():
    wake = Wake()
    ours, theirs = socket.socketpair()
    try:
        assert wake.wait(0.01, also=ours.fileno()) is False
        theirs.send(b"n")  # what a NOTIFY does to the claim connection's socket
        assert wake.wait(5, also=ours.fileno()) is True
        assert not wake.is_set()
    finally:
        wake.close()
        ours.close()
        theirs.close()


def test_a_set_racing_a_clear_is_never_lost():
    # clear() lowers the flag, then drains the pipe. A set() in between leaves the flag up and
    # its byte drained: made here directly (a thread would hit that moment too rarely to test).
    wake = Wake()
    try:
        wake.clear()
        wake.set()
        os.read(wake._read, 4096)  # the racing clear's drain, after the set wrote
        assert wake.is_set() and wake.wait(0) is True, "a wait must read the flag, not only the pipe"
        # The other order: the drain first, then the set's flag and byte. A clear after it
        # drains the byte: a wait then times out.
        wake.clear()
        wake.set()
        assert wake.wait(0) is True
        wake.clear()
        assert not wake.is_set() and wake.wait(0) is False
    finally:
        wake.close()


def test_after_close_set_and_clear_touch_no_file_descriptor():
    wake = Wake()
    wake.close()
    wake.set()  # a signal at exit: nothing written to a number that may be reused
    wake.clear()
    assert wake.wait(0) is True
