"""The claim loop's wake-up call: an event any thread may set, whose wait also ends when a
socket (the claim connection, LISTENing) has something to read.

A ``threading.Event`` cannot wait on a socket, so a NOTIFY had to reach the claim loop
through a listener thread: one more thread to wake on every start, on a machine where each
wake-up of an idle process or thread costs a fraction of a millisecond. A pipe can be
waited on beside the socket in one ``select``.
"""

from __future__ import annotations

import os
import select


class Wake:
    def __init__(self) -> None:
        self._set = False
        self._closed = False
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def set(self) -> None:
        if not self._set:
            self._set = True
            try:
                os.write(self._write, b"\0")
            except BlockingIOError:  # the pipe is full: a wait sees it readable anyway
                pass

    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        if self._closed:
            return
        # The flag first: a set() racing this drain leaves the flag up, which wait() reads first.
        self._set = False
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass

    def wait(self, timeout: float | None = None, *, also: int | None = None) -> bool:
        """Until set, ``also`` (a file descriptor) is readable, or ``timeout`` seconds passed;
        True unless the time ran out."""
        if self._set:
            return True
        fds = [self._read] if also is None else [self._read, also]
        ready, _, _ = select.select(fds, [], [], timeout)
        return bool(ready) or self._set

    def close(self) -> None:
        """Close the pipe; the flag stays up, so a later set() (a signal at exit) writes
        nothing to a file descriptor number that may belong to something else by then."""
        self._set = True
        self._closed = True
        os.close(self._read)
        os.close(self._write)
