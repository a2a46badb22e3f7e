"""The NOTIFY payloads on pgflow's channel, read without a database."""

from __future__ import annotations

import pytest

from pgflow.core.definitions import valid_queue
from pgflow.store.locking import read_note


@pytest.mark.parametrize(
    ("payload", "read"),
    [
        ("workflows 42", ("workflows", 42, "")),  # a start: the queue and its first attempt
        ("workflows", ("workflows", None, "")),  # a commit, an operator, a resumed queue
        ("mail.eu:priority-1 7", ("mail.eu:priority-1", 7, "")),
        ("workflows x", ("workflows", None, "")),  # not an id: the queue alone, never an error
        ("workflows ", ("workflows", None, "")),
        ("workflows \u00b2", ("workflows", None, "")),  # a digit int() refuses: not an id either
        ('workflows 42 {"worker": "w 1"}', ("workflows", 42, '{"worker": "w 1"}')),  # handed to a worker
        ("workflows x {}", ("workflows", None, "")),
    ],
)
def test_a_note_names_its_queue_and_maybe_its_attempt_and_hand_off(payload, read):
    assert read_note(payload) == read


def test_no_queue_name_holds_the_separator():
    # The payload splits at its first space: a queue name never holds one.
    assert not valid_queue("two words") and valid_queue("mail.eu:priority-1")
