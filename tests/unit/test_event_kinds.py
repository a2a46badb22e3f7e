"""Event kinds are named once, in core.events, and the model offers exactly those."""

from __future__ import annotations

import re
from pathlib import Path

from pgflow.core.events import PAUSE_ENDS, RUN_ENDS, EventKind
from pgflow.models import Event

SOURCE = Path(__file__).resolve().parents[2] / "pgflow" / "core" / "events.py"


def test_the_stored_strings_are_the_members_values():
    assert [value for value, _label in Event._meta.get_field("event").choices] == [kind.value for kind in EventKind]
    assert EventKind.FAN_OUT_OPENED == "fan_out_opened"


def test_every_member_says_which_transition_writes_it():
    lines = SOURCE.read_text().splitlines()
    for kind in EventKind:
        index = next(i for i, line in enumerate(lines) if re.match(rf"\s+{kind.name} = ", line))
        comment = []
        while lines[index - 1].strip().startswith("#"):
            index -= 1
            comment.append(lines[index])
        assert "store." in " ".join(comment), f"{kind.name} needs a comment naming the transition that writes it"


def test_the_sets_are_made_of_members():
    assert RUN_ENDS <= PAUSE_ENDS <= set(EventKind)
