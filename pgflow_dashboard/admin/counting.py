"""Counts the run list can afford on any history: a count stops at :data:`COUNT_CAP`.

Counting every match reads every match: 90,000 finished runs, or 33,000 runs with a common
attribute, cost more than the rest of the page together, while "more than 1,000" tells an
operator as much. The first page needs no count (it is read newest first, 50 rows). The
status filter's live counts stop at the cap too.
"""

from __future__ import annotations

from typing import Any, cast

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

COUNT_CAP = 1_000


def capped_count(queryset: QuerySet[Any], cap: int | None = None) -> int:
    """How many rows ``queryset`` holds, up to ``cap + 1`` (more than ``cap``, by default
    :data:`COUNT_CAP`): the ids only, unordered (an order would make the database read the
    matches in that order)."""
    limit = (COUNT_CAP if cap is None else cap) + 1
    return queryset.order_by().values("pk")[:limit].count()


class CappedPaginator(Paginator):
    """Django's paginator with :func:`capped_count` as its count: past the cap, the pages go
    on to the cap's last page."""

    @cached_property
    def count(self) -> int:
        return capped_count(cast(QuerySet[Any], self.object_list))  # the admin pages a queryset

    @property
    def capped(self) -> bool:
        return self.count > COUNT_CAP


def shown(count: int) -> str:
    """``"123"``, or past :data:`COUNT_CAP` ``"1,000+"``."""
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else f"{count:,}"


def status_counts(using: str, statuses: list[str]) -> dict[str, int]:
    """``{status: runs}``, each count stopping at :data:`COUNT_CAP` + 1: one query reading at
    most that many entries of ``pgflow_run_status_created`` per status (index only)."""
    with connections[using].cursor() as cursor:
        cursor.execute(STATUS_COUNTS_SQL, [COUNT_CAP + 1, statuses])
        return {status: int(runs) for status, runs in cursor.fetchall()}


STATUS_COUNTS_SQL = """
SELECT s.status, (SELECT count(*) FROM (SELECT 1 FROM pgflow_run r WHERE r.status = s.status LIMIT %s) AS c)
FROM unnest(%s::text[]) AS s(status)
"""
