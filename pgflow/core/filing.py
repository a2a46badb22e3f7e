"""The day history is filed under (pgflow.store.history): an ended run's attempts and events
go to the partitions of the UTC day the run ended, never before their own end. So the rows
that ended at or after a moment are all under that moment's UTC day or later, and a read
that says so lets PostgreSQL leave the earlier days' partitions out when it plans."""

from __future__ import annotations

from datetime import UTC, date, datetime


def first_day(moment: datetime) -> date:
    """The earliest day whose partitions may hold a row that ended at ``moment`` or after."""
    return moment.astimezone(UTC).date()


def filed_from(column: str, parameter: str) -> str:
    """The SQL condition on ``column`` (a ``history_day``) that keeps the rows that ended at or
    after a moment, given as the query's ``%(parameter)s`` = ``first_day(moment)``; a row of an
    open run (NULL, in the live partition) is kept too."""
    return f"({column} IS NULL OR {column} >= %({parameter})s)"
