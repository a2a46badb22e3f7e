"""The hot statements as the worker and start() send them, with the parameters they really
pass, take psycopg's cached parse: past its limits (the text's bytes, the parameters'
count) psycopg parses a statement's placeholders again on every run
(tests/unit/test_hot_statements.py checks the texts alone)."""

from __future__ import annotations

import pytest
from psycopg import _queries

from pgflow import store
from pgflow.models import Step
from pgflow.store.claims import Kinds
from tests import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def parsed_again(monkeypatch) -> list[bytes]:
    """The statements psycopg parses without its cache, each parse passed through."""
    seen: list[bytes] = []
    for name in ("_query2pg_nocache", "_query2pg_client_nocache"):
        parse = getattr(_queries, name)

        def spy(query, *args, _parse=parse, **kwargs):
            seen.append(bytes(query))
            return _parse(query, *args, **kwargs)

        monkeypatch.setattr(_queries, name, spy)
    return seen


def test_a_start_and_both_claims_are_parsed_from_the_cache(parsed_again):
    runs = [wf.ThreeSteps.start(input={"order": order}) for order in range(3)]
    first = Step.objects.get(run=runs[0])
    readers = frozenset({f"{wf.ThreeSteps.workflow_path()}:two"})
    assert store.claim_notified(first.pk, worker="w", queues=["workflows"], readers=readers)
    kinds = Kinds(threads=5, awaiting=0, readers=readers)  # as a worker's claim loop passes them
    assert len(store.claim(worker="w", queues=["workflows"], limit=5, kinds=kinds)) == 2
    assert parsed_again == []
