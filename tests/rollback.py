"""The error a test raises inside ``transaction.atomic()`` to roll the caller's transaction
back: the caller's own, one that pgflow never raises, so a ``pytest.raises`` of it cannot
pass on a failing ``start()`` or ``enqueue()``."""


class RolledBack(Exception):
    """The caller's own error: its transaction rolls back."""
