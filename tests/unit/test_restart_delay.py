"""How long ``--processes`` waits before starting again a child that keeps dying."""

from __future__ import annotations

from pgflow.runtime.processes import MAX_RESTART_DELAY, RESTART_DELAY, restart_delay


def test_the_delay_doubles_with_each_quick_death_up_to_its_bound():
    assert [restart_delay(deaths) for deaths in (1, 2, 3, 4)] == [RESTART_DELAY * n for n in (1, 2, 4, 8)]
    assert restart_delay(7) == MAX_RESTART_DELAY == restart_delay(10_000)
