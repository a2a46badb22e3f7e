"""``manage.py pgflow runs --search 'attr.…'`` as a real subprocess: the command line reads
attributes as the run list and the MCP do."""

from __future__ import annotations

import pytest

from tests import attribute_workflows as aw
from tests.integration.test_cli import answer, pgflow

pytestmark = pytest.mark.django_db(transaction=True)  # the subprocess reads what the test committed


def test_runs_searches_attributes():
    gold = aw.TwoSteps.start(attributes={"plan": "gold", "amount": 120})
    aw.TwoSteps.start(attributes={"plan": "silver", "amount": 80})
    assert [row["run_id"] for row in answer("runs", "--search", "attr.plan:gold")["runs"]] == [gold.pk]
    assert [row["run_id"] for row in answer("runs", "--search", "attr.amount:>=100 class:TwoSteps")["runs"]] == [
        gold.pk
    ]
    bad = pgflow("runs", "--search", "attr.:gold")
    assert bad.returncode == 2
    assert "attr needs an attribute's name (1-64 characters of A-Z a-z 0-9 _ . -)" in bad.stderr
