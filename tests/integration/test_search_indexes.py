"""Each qualifier of the search language is answered by an index (migration 0016 and the
earlier ones; benchmarks/search_runs.py times them at 100,000 runs), and the forms written
for the index find exactly what the language says: array positions and keys holding "__"
in JSON paths, the class name read from the runs' classes, the current step of open runs,
a comparison's default since: window, and failed:<from>..<until>."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from pgflow.models import Step, WorkflowRun
from pgflow.search import parse
from pgflow.searching import runs_matching
from pgflow.testing import run_workflow
from tests import search_workflows as sw
from tests.dashboard_support import changelist_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


def found(text: str) -> set[int]:
    return set(runs_matching(parse(text)).values_list("pk", flat=True))


def plan(text: str) -> str:
    sql, params = runs_matching(parse(text)).query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        # Tables this small are read whole otherwise, or probed by run id for an attempt.
        for kind in ("seqscan", "mergejoin", "nestloop"):
            cursor.execute(f"SET LOCAL enable_{kind} = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.fixture
def shop():
    """A paid checkout, a declined one (paused by its failed charge), one waiting at charge."""

    def checkout(customer, amount=None, **extra):
        run = sw.Checkout.start(input={"customer": {"id": customer}, **extra}, key=f"order-{customer}")
        signals = {"payment_received": {"amount": amount}} if amount is not None else None
        return run_workflow(run, signals=signals)

    return {"paid": checkout(42, 120), "declined": checkout(45, decline=True), "waiting": checkout(44)}


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("input.customer.id:42", "pgflow_run_input"),
        ("output.charge.paid:120", "pgflow_step_output"),
        ("key:order-42", "pgflow_run_key"),
        ("key:order-4*", "pgflow_run_key"),
        ("error:declined", "pgflow_step_error"),
        ("step:charge", "pgflow_run_status_created"),
        ("class:Checkout", "pgflow_run_class_created"),
        ("status:paused", "pgflow_run_status_created"),
        ("since:2d", "Index Cond: (created_at >="),
        ("input.customer.id:>40", "Index Cond: (created_at >="),  # a comparison: its since: window
        ("failed:2026-01-01T00:00Z..2026-01-01T01:00Z", "pgflow_step_finished"),
        ("parent:7", "pgflow_run_parent"),
        ("attr.plan:gold", "pgflow_run_attributes"),
    ],
)
def test_each_qualifier_is_answered_by_an_index(shop, query, index):
    # A few thousand finished runs and attempts beside the shop's, so the planner weighs the
    # indexes as on a real history (on a handful of rows any plan is as good).
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgflow_run (workflow_class, status, input, key, definition_digest, created_at, updated_at, "
            "finished_at, paused_reason, attributes) "
            "SELECT workflow_class, 'finished', jsonb_build_object('customer', jsonb_build_object('id', 1000 + n)), "
            "'pad-' || n, definition_digest, created_at - n * interval '1 hour', updated_at, finished_at, '', "
            "jsonb_build_object('plan', 'silver') FROM pgflow_run, generate_series(1, 3000) AS n WHERE id = %s",
            [shop["paid"].pk],
        )
        cursor.execute(
            "INSERT INTO pgflow_step (run_id, step_name, attempt, status, outcome, queue, priority, created_at, "
            "scheduled_at, finished_at, worker, output) "
            "SELECT r.id, 'charge', 1, 'completed', 'completed', 'default', 0, r.created_at, r.created_at, "
            "r.created_at, 'w', jsonb_build_object('paid', r.id) FROM pgflow_run r WHERE r.key LIKE 'pad-%%'"
        )
        cursor.execute("ANALYZE pgflow_run, pgflow_step")
    shown = plan(query)
    assert index in shown, shown


def test_the_index_forms_find_what_the_language_says(shop):
    assert found("input.customer.id:42 key:order-42") == {shop["paid"].pk}
    assert found("output.charge.paid:120") == {shop["paid"].pk}
    assert found("output.charge.paid:121") == set()
    assert found("key:order-4*") == {run.pk for run in shop.values()}
    assert found("error:declined") == {shop["declined"].pk}
    # The current step: the waiting run's, and the paused run's (its reserve failed); a
    # finished run has none.
    assert found("step:charge") == {shop["waiting"].pk}
    assert found("step:reserve") == {shop["declined"].pk}
    assert found("step:ship") == set()
    assert found("class:Checkout") == {run.pk for run in shop.values()}
    assert found("class:out") == set()  # a class's whole name, not the end of one
    assert found("class:Refund") == set()


def test_json_paths_read_digits_as_positions_or_keys_and_keys_with_underscores():
    first = sw.Refund.start(input={"items": [{"sku": "A"}, {"sku": "B"}], "a__b": 1})
    second = sw.Refund.start(input={"items": [{"sku": "B"}, {"sku": "A"}]})
    keyed = sw.Refund.start(input={"items": {"0": {"sku": "A"}}})
    assert found("input.items.0.sku:A") == {first.pk, keyed.pk}
    assert found("input.items.1.sku:A") == {second.pk}
    assert found("input.a__b:1") == {first.pk}
    assert found("input.a.b:1") == set()


def test_a_comparison_reads_the_last_7_days_unless_since_says(shop, login, viewer):
    old = sw.Refund.start(input={"amount": 500})
    WorkflowRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=8))
    recent = sw.Refund.start(input={"amount": 300})
    assert found("input.amount:>100") == {recent.pk}
    assert found("input.amount:>100 since:30d") == {old.pk, recent.pk}
    assert found("input.amount:500") == {old.pk}  # an equality reads every run, on its index
    page = login(viewer).get(changelist_url(), {"q": "input.amount:>100"}).content.decode()
    notes = [html.unescape(re.sub(r"<[^>]+>", "", m)).strip() for m in re.findall(r'<li class="info">(.*?)</li>', page)]
    assert any("since:7d" in note and "since:30d" in note for note in notes), notes


def test_failed_finds_the_runs_whose_attempt_failed_in_the_span(shop, login, viewer):
    failed = Step.objects.get(run=shop["declined"], status="failed")
    at = failed.finished_at
    span = f"failed:{(at - timedelta(minutes=1)).isoformat()}..{(at + timedelta(minutes=1)).isoformat()}"
    assert found(span) == {shop["declined"].pk}
    later = f"failed:{(at + timedelta(minutes=1)).isoformat()}..{(at + timedelta(hours=1)).isoformat()}"
    assert found(later) == set()
    # Over HTTP, as an insights failures bar leads here: the run is listed; a reversed span is
    # a message naming what failed: takes.
    client = login(viewer)
    page = client.get(changelist_url(), {"q": span}).content.decode()
    assert re.findall(r'class="field-id"><a href="[^"]*">(\d+)</a>', page) == [str(shop["declined"].pk)]
    reversed_span = f"failed:{at.isoformat()}..{(at - timedelta(hours=1)).isoformat()}"
    response = client.get(changelist_url(), {"q": reversed_span})
    assert response.status_code == 200
    assert "is not before" in html.unescape(response.content.decode())
    assert "failed takes two ISO 8601 times" in html.unescape(response.content.decode())


def test_the_cli_and_the_mcp_tool_say_a_comparison_read_a_window():
    from pgflow.cli.listing import format_runs, list_runs
    from pgflow_dashboard.mcp.reads import search_runs

    sw.Refund.start(input={"amount": 300})
    answer = list_runs(workflow=None, status=None, search="input.amount:>100", limit=10)
    assert answer["count"] == 1 and "since:7d" in answer["notes"][0]
    assert any("since:7d" in line for line in format_runs(answer))
    assert "notes" not in list_runs(workflow=None, status=None, search="input.amount:300", limit=10)
    found = search_runs(query="input.amount:>100")
    assert found["count"] == 1 and "since:7d" in found["notes"][0]
