"""The one format of an actor (``Event.actor``, ``QueueState.changed_by``)."""

from __future__ import annotations

from pgflow.core.events import SYSTEM, actor_name, with_reason, without_reason


class User:
    def get_username(self) -> str:
        return "ada"


def test_none_is_the_system_a_user_is_user_colon_name_anything_else_its_str():
    assert actor_name(None) == SYSTEM == "system"
    assert actor_name(User()) == "user:ada"
    assert actor_name("agent:claude for user:ada") == "agent:claude for user:ada"
    assert actor_name("x" * 300) == "x" * 200


def test_a_reason_follows_the_actor_and_is_taken_off_to_read_who_acted():
    named = with_reason(User(), "card declined twice")
    assert named == "user:ada (reason: card declined twice)"
    assert without_reason(named) == "user:ada"
    assert without_reason("agent:claude for user:ada") == "agent:claude for user:ada"
    assert len(with_reason(User(), "x" * 300)) == 200
