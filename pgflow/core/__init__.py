"""Pure pgflow code: no Django, no database, no clock reads (``now`` is passed in)."""
