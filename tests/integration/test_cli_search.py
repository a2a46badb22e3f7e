"""The search language on a real database (pgflow.searching): each qualifier finds the runs
it names and no other, and the run list's search box reads it over HTTP, with a bad query
a message on the page, never a 500."""

from __future__ import annotations

import html
import re

import pytest

from pgflow.models import WorkflowRun
from pgflow.search import SearchError, parse
from pgflow.searching import runs_matching
from pgflow.testing import run_workflow
from tests import search_workflows as sw
from tests.dashboard_support import changelist_url

pytest_plugins = ["tests.dashboard_fixtures"]  # the users and login fixtures

pytestmark = pytest.mark.django_db


def found(text: str) -> set[int]:
    return set(runs_matching(parse(text)).values_list("pk", flat=True))


@pytest.fixture
def shop():
    """Four checkouts and a refund: paid 120 and 80 (finished), one waiting for payment, one
    declined (paused), and a refund."""

    def checkout(customer, amount=None, **extra):
        run = sw.Checkout.start(input={"customer": {"id": customer, "plan": "gold"}, "items": [1, 2], **extra})
        signals = {"payment_received": {"amount": amount}} if amount is not None else None
        return run_workflow(run, signals=signals)

    return {
        "big": checkout(42, 120, note="rush", key_hint=True),
        "small": checkout("43", 80, flag=True),
        "waiting": checkout(44),
        "declined": checkout(45, decline=True),
        "refund": run_workflow(sw.Refund.start(input={"amount": 5, "flag": "true"}, key="refund-7")),
    }


def test_status_class_step_and_key(shop):
    assert found("status:paused") == {shop["declined"].pk}
    assert found("status:finished class:Checkout") == {shop["big"].pk, shop["small"].pk}
    assert found("class:tests.search_workflows.Refund") == {shop["refund"].pk}
    assert found("step:charge") == {shop["waiting"].pk}
    assert found("key:refund-7") == {shop["refund"].pk}
    assert found("key:refund-*") == {shop["refund"].pk}
    assert found("key:refund") == set()  # a key is exact; * asks for a prefix


def test_input_paths_match_numbers_and_text(shop):
    assert found("input.customer.id:42") == {shop["big"].pk}
    assert found("input.customer.id:43") == {shop["small"].pk}  # the text "43" too, unquoted
    assert found('input.customer.id:"42"') == set()  # quoted: the text only, and 42 is a number
    assert found("input.customer.plan:gold") == {shop[name].pk for name in ("big", "small", "waiting", "declined")}
    assert found("input.flag:true") == {shop["small"].pk, shop["refund"].pk}  # true, and the text "true"
    assert found("input.customer.id:>43") == {shop["waiting"].pk, shop["declined"].pk}  # numbers only: not "43"
    assert found("input.flag:>0") == set()  # jsonb orders true above every number: numbers only
    assert found("input.note:rush input.customer.id:42") == {shop["big"].pk}
    assert found("input.nothing:42") == set()


def test_output_paths_and_comparisons(shop):
    assert found("output.charge.paid:>100") == {shop["big"].pk}
    assert found("output.charge.paid:>=80") == {shop["big"].pk, shop["small"].pk}
    assert found("output.charge.paid:<100") == {shop["small"].pk}
    assert found("output.charge.currency:EUR") == {shop["big"].pk, shop["small"].pk}
    assert found("output.ship.shipped:true") == {shop["big"].pk, shop["small"].pk}
    assert found("output.reserve.reserved:2 status:running") == {shop["waiting"].pk}


def test_error_text_matches_the_class_or_the_message(shop):
    assert found("error:CardDeclined") == {shop["declined"].pk}
    assert found("error:carddeclined") == {shop["declined"].pk}
    assert found('error:"customer 45"') == {shop["declined"].pk}
    assert found("error:Timeout") == set()


def test_since_and_parent(shop):
    everyone = {run.pk for run in shop.values()}
    assert found("since:1h") == everyone
    WorkflowRun.objects.filter(pk=shop["refund"].pk).update(created_at=shop["refund"].created_at.replace(year=2020))
    assert found("since:2d") == everyone - {shop["refund"].pk}
    assert found(f"parent:{shop['big'].pk}") == set()


def test_bare_words_are_the_plain_search(shop):
    assert found("refund") == {shop["refund"].pk}
    assert found(f"#{shop['waiting'].pk}") == {shop["waiting"].pk}
    assert found("refund status:paused") == set()


def test_attributes_are_searched_like_the_rest(shop):
    tagged = sw.Refund.start(attributes={"plan": "gold", "amount": 120})
    assert found("attr.plan:gold") == {tagged.pk}
    assert found("attr.amount:>100 class:Refund") == {tagged.pk}
    with pytest.raises(SearchError) as caught:
        list(runs_matching(parse("attr.:gold")))
    assert "attr needs an attribute's name" in str(caught.value)


# --- the run list's search box, over HTTP -----------------------------------------------------


def listed(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'class="field-id"><a href="[^"]*">(\d+)</a>', page)}


def messages_of(page: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", m)).strip() for m in re.findall(r'<li class="error">(.*?)</li>', page)]


def test_the_run_list_search_box_reads_the_language(shop, login, viewer):
    client = login(viewer)
    response = client.get(changelist_url(), {"q": "status:finished output.charge.paid:>100"})
    assert response.status_code == 200
    assert listed(response.content.decode()) == {shop["big"].pk}
    response = client.get(changelist_url(), {"q": 'class:Checkout error:"card declined"'})
    assert listed(response.content.decode()) == {shop["declined"].pk}


def test_plain_searches_still_work_in_the_box(shop, login, viewer):
    client = login(viewer)
    assert listed(client.get(changelist_url(), {"q": "refund-"}).content.decode()) == {shop["refund"].pk}
    assert listed(client.get(changelist_url(), {"q": str(shop["small"].pk)}).content.decode()) == {shop["small"].pk}
    assert listed(client.get(changelist_url(), {"q": "parent:12"}).content.decode()) == set()


def test_a_bad_query_is_a_message_on_the_page_not_a_500(shop, login, viewer):
    client = login(viewer)
    for query, says in (
        ("status:sleeping", "status must be one of running, paused, finished, cancelled"),
        ("output.charge.paid:>lots", "> compares with a number"),
        ("since:forever", "since takes a duration such as 30m, 2h, 2d or 1w"),
        ("attr.plan:>gold", "> compares with a number (such as attr.<name>:>100)"),
        ("bogus:1", "unknown qualifier 'bogus'"),
    ):
        response = client.get(changelist_url(), {"q": query})
        assert response.status_code == 200, query
        page = response.content.decode()
        shown = messages_of(page)
        assert any(says in message for message in shown), (query, shown)
        assert listed(page) == set(), query


def test_a_key_with_colons_still_finds_its_run_unquoted(login, viewer):
    run = run_workflow(sw.Refund.start(key="schedule:3:2025-01-01T00:00:00+00:00"))
    page = login(viewer).get(changelist_url(), {"q": "schedule:3:2025-01-01"}).content.decode()
    assert listed(page) == {run.pk}
    assert messages_of(page) == []
