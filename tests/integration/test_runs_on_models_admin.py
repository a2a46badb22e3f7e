"""Runs on the shop's order pages, over HTTP: ``RunsInline`` on the order's change page, its
controls' confirmation page, ``start_workflow_action`` (confirmation, idempotent keys, the
input form, permissions), and the run list's filter by subject type
(example_project/shop/admin.py wires them as a user would)."""

from __future__ import annotations

import re
import threading

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import pgflow
from example_project.shop.models import Order
from example_project.shop.workflows import OrderFulfilment, RefundApproval
from pgflow.models import WorkflowRun
from pgflow.testing import run_workflow
from pgflow_dashboard.admin import StartWorkflowMixin, start_workflow_action
from tests import dashboard_workflows as dw
from tests import workflows as wf
from tests.dashboard_support import changelist_url, make_user, messages_of, run_url

pytestmark = pytest.mark.django_db(transaction=True)


def shop_user(name: str, *shop: str, runs: tuple[str, ...] = ()) -> Client:
    user = make_user(name, perms=runs)
    for codename in shop:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="shop", codename=codename))
    client = Client()
    client.force_login(User.objects.get(pk=user.pk))
    return client


def order(customer: str = "ada") -> Order:
    return Order.objects.create(customer=customer, email=f"{customer}@example.com", total_cents=1200, vendors=[1])


def order_url(obj: Order) -> str:
    return reverse("admin:shop_order_change", args=[obj.pk])


def orders_url() -> str:
    return reverse("admin:shop_order_changelist")


def act_url(run: WorkflowRun) -> str:
    return reverse("admin:pgflow_workflowrun_act", args=[run.pk])


def rows(page) -> dict[int, str]:
    """The inline's rows by run id: each row's HTML."""
    html = page.content.decode()
    return {
        int(pk): row for pk, row in re.findall(r'<tr class="pgflow-run-row" data-run="(\d+)">(.*?)</tr>', html, re.S)
    }


# --- the inline --------------------------------------------------------------------------------


def test_the_inline_lists_the_orders_runs_newest_first():
    ada, bob = order("ada"), order("bob")
    done = run_workflow(wf.ThreeSteps.start(subject=ada))
    paused = run_workflow(dw.Hostile.start(subject=ada))
    wf.Delayed.start(subject=bob)
    page = shop_user("viewer", "view_order", runs=("view_workflowrun",)).get(order_url(ada))
    assert page.status_code == 200
    listed = rows(page)
    assert list(listed) == [paused.pk, done.pk]  # bob's run is not ada's
    assert f'href="{run_url(done)}"' in listed[done.pk]
    assert "ThreeSteps" in listed[done.pk] and "pgflow-status-finished" in listed[done.pk]
    assert "pgflow-status-paused" in listed[paused.pk] and "<code>explode</code>" in listed[paused.pk]
    # The bar: one piece per phase of each attempt, coloured as the run page's chart.
    assert listed[done.pk].count('class="pgflow-runbar-piece') >= 3
    assert "pgflow-series-ran_ok" in listed[done.pk] and "pgflow-series-ran_failed" in listed[paused.pk]
    # A viewer may not act: no controls.
    assert "pgflow-button-" not in page.content.decode()
    assert "Workflow runs" in page.content.decode()


def test_the_inline_offers_the_controls_an_operator_may_use():
    ada = order()
    running = wf.Delayed.start(subject=ada)
    paused = run_workflow(dw.Hostile.start(subject=ada))
    page = shop_user("operator", "view_order", runs=("view_workflowrun", "change_workflowrun")).get(order_url(ada))
    listed = rows(page)
    assert re.findall(r"pgflow-button-(\w+)", listed[running.pk]) == ["skip", "pause", "cancel"]
    assert re.findall(r"pgflow-button-(\w+)", listed[paused.pk]) == ["resume", "skip", "cancel"]
    assert f'href="{act_url(running)}?action=pause&amp;next=' in listed[running.pk]


def test_the_inline_shows_only_to_who_may_view_runs():
    ada = order()
    wf.Delayed.start(subject=ada)
    page = shop_user("clerk", "view_order", "change_order").get(order_url(ada))
    assert page.status_code == 200
    assert "pgflow-runs-inline" not in page.content.decode()


def test_the_inline_caps_its_list_and_links_to_all():
    ada = order()
    for _ in range(22):
        wf.Delayed.start(subject=ada)
    page = shop_user("viewer", "view_order", runs=("view_workflowrun",)).get(order_url(ada))
    assert len(rows(page)) == 20
    subject_type = ContentType.objects.get_for_model(Order)
    assert f"{changelist_url()}?subject_type={subject_type.pk}&amp;q={ada.pk}" in page.content.decode()
    assert "The newest 20 of 22" in page.content.decode()


def test_the_inline_reads_a_few_queries_however_many_runs_it_lists():
    few, many = order("few"), order("many")
    for subject, count in ((few, 2), (many, 15)):
        for _ in range(count):
            run_workflow(wf.ThreeSteps.start(subject=subject))
            wf.Delayed.start(subject=subject)
    client = shop_user("operator", "view_order", runs=("view_workflowrun", "change_workflowrun"))
    client.get(order_url(few))  # warm the content type cache

    def queries(subject: Order) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(order_url(subject)).status_code == 200
        return len(captured)

    assert queries(many) <= queries(few) + 1  # + the total count, past max_runs


def test_saving_the_order_ignores_the_inline_and_touches_no_run():
    ada = order()
    run = wf.Delayed.start(subject=ada)
    client = shop_user("clerk", "view_order", "change_order", "add_order", runs=("view_workflowrun",))
    assert "pgflow-runs-inline" in client.get(order_url(ada)).content.decode()
    form = {
        "customer": "ada lovelace",
        "email": "ada@example.com",
        "total_cents": "1300",
        "vendors": "[1]",
        "status": "placed",
        "_save": "Save",
    }
    saved = client.post(order_url(ada), form)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    ada.refresh_from_db()
    assert ada.customer == "ada lovelace"
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"
    adding = client.get(reverse("admin:shop_order_add"))
    assert adding.status_code == 200 and "pgflow-runs-inline" not in adding.content.decode()  # no runs yet


# --- a control's confirmation page ------------------------------------------------------------


def test_a_control_is_confirmed_then_applied_and_returns_to_the_order():
    ada = order()
    run = wf.Delayed.start(subject=ada)
    client = shop_user("operator", "view_order", runs=("view_workflowrun", "change_workflowrun"))
    page = client.get(act_url(run), {"action": "pause", "next": order_url(ada)})
    assert page.status_code == 200
    assert "Nothing has changed yet" in page.content.decode()
    assert WorkflowRun.objects.get(pk=run.pk).status == "running"
    done = client.post(act_url(run), {"action": "pause", "next": order_url(ada), "reason": "customer asked"})
    assert done.status_code == 302 and done["Location"] == order_url(ada)
    run.refresh_from_db()
    assert run.status == "paused"
    assert run.events.filter(event="paused").get().actor == "user:operator (reason: customer asked)"
    assert f"Run {run.pk} paused." in messages_of(client.get(order_url(ada)))


def test_a_skip_confirmed_twice_skips_only_the_step_its_page_showed():
    from tests import dashboard_workflows as dw

    ada = order()
    run = dw.Later.start(subject=ada)
    client = shop_user("operator", "view_order", runs=("view_workflowrun", "change_workflowrun"))
    page = client.get(act_url(run), {"action": "skip", "next": order_url(ada)}).content.decode()
    posted = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))
    assert posted["step"] == "later"
    client.post(act_url(run), posted)
    client.post(act_url(run), posted)  # the confirmation sent again
    assert WorkflowRun.objects.get(pk=run.pk).current_step == "after"
    assert run.events.filter(event="skipped").count() == 1
    assert "its current step is 'after', not 'later'; nothing was skipped" in " ".join(
        messages_of(client.get(order_url(ada)))
    )


def test_a_control_page_refuses_a_viewer_an_unknown_action_and_a_foreign_next():
    ada = order()
    run = wf.Delayed.start(subject=ada)
    viewer = shop_user("viewer", "view_order", runs=("view_workflowrun",))
    assert viewer.get(act_url(run), {"action": "pause"}).status_code == 403
    assert viewer.post(act_url(run), {"action": "cancel"}).status_code == 403
    operator = shop_user("operator", "view_order", runs=("view_workflowrun", "change_workflowrun"))
    bad = operator.get(act_url(run), {"action": "explode"})
    assert bad.status_code == 400 and "unknown action 'explode'" in bad.content.decode()
    away = operator.post(act_url(run), {"action": "cancel", "next": "https://evil.example/"})
    assert away["Location"] == run_url(run)  # never off this site
    assert WorkflowRun.objects.get(pk=run.pk).status == "cancelled"
    ended = operator.get(act_url(run), {"action": "pause"})
    assert "cannot pause a cancelled run" in ended.content.decode()


# --- the start action -----------------------------------------------------------------------


def act(client: Client, action: str, orders: list[Order], **extra: str):
    return client.post(orders_url(), {"action": action, "_selected_action": [o.pk for o in orders], **extra})


def test_the_start_action_confirms_then_starts_and_a_second_click_starts_nothing():
    ada, bob, cy = order("ada"), order("bob"), order("cy")
    earlier = OrderFulfilment.start(subject=bob, key=f"fulfil-order-{bob.pk}")
    client = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
    page = act(client, "start_orderfulfilment", [ada, bob, cy])
    assert page.status_code == 200
    text = " ".join(page.content.decode().split())
    assert "<strong>2</strong> of the 3 selected orders would start a run" in text
    assert "<strong>1</strong> already has a run with that key (1 open)" in text
    assert "Nothing has started yet" in text
    assert WorkflowRun.objects.count() == 1

    done = act(client, "start_orderfulfilment", [ada, bob, cy], confirm="yes")
    assert done.status_code == 302
    runs = {run.subject_id: run for run in OrderFulfilment.runs()}
    assert set(runs) == {str(ada.pk), str(bob.pk), str(cy.pk)} and runs[str(bob.pk)] == earlier
    assert runs[str(ada.pk)].key == f"fulfil-order-{ada.pk}"
    assert runs[str(ada.pk)].input == {"gateway_flakiness": 0.3}
    said = messages_of(client.get(orders_url()))
    assert any(
        m.startswith("Started 2 runs of OrderFulfilment:") and f'<a href="{run_url(runs[str(ada.pk)])}">' in m
        for m in said
    ), said
    assert any(f'<a href="{run_url(earlier)}">#{earlier.pk}</a>' in m and "exists" in m for m in said), said

    again = act(client, "start_orderfulfilment", [ada, bob, cy])
    assert "<strong>0</strong> of the 3" in again.content.decode()
    act(client, "start_orderfulfilment", [ada, bob, cy], confirm="yes")  # a double click
    assert OrderFulfilment.runs().count() == 3


def test_two_confirmations_at_once_start_one_run_per_order():
    """A double click, or two operators: both requests confirm at the same moment."""
    orders = [order(name) for name in ("ada", "bob", "cy")]
    clients = [
        shop_user(name, "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
        for name in ("op1", "op2")
    ]
    barrier = threading.Barrier(2)
    answers: list[int] = []

    def confirm(client: Client) -> None:
        try:
            barrier.wait(timeout=10)
            answers.append(act(client, "start_orderfulfilment", orders, confirm="yes").status_code)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=confirm, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert answers == [302, 302]
    assert sorted(int(run.subject_id) for run in OrderFulfilment.runs()) == sorted(o.pk for o in orders)


def start_options(client: Client) -> list[str]:
    """The start actions the order list's action menu offers this user (the menu shows when
    there is an order to act on)."""
    assert Order.objects.exists()
    return re.findall(r'<option value="(start_\w+)"', client.get(orders_url()).content.decode())


def test_the_start_action_shows_only_to_who_may_start_runs():
    ada = order()
    operator = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
    clerk = shop_user("clerk", "view_order", "change_order", "delete_order", runs=("view_workflowrun",))
    assert start_options(operator) == ["start_orderfulfilment", "start_refundapproval"]
    assert start_options(clerk) == []  # the menu still offers the order admin's other actions
    assert '<option value="delete_selected"' in clerk.get(orders_url()).content.decode()
    for extra in ({}, {"confirm": "yes"}):  # posted anyway: not an action of this user's
        response = act(clerk, "start_orderfulfilment", [ada], **extra)
        assert response.status_code == 302
    assert "No action selected." in messages_of(clerk.get(orders_url()))
    assert WorkflowRun.objects.count() == 0


def test_the_start_action_refuses_who_may_not_start_runs_even_when_shown():
    """The second line: an admin whose own check shows the action to everyone still starts
    nothing for a user without the change permission on runs."""
    ada = order()
    model_admin = admin.site._registry[Order]
    model_admin.has_pgflow_start_permission = lambda request: True  # type: ignore[attr-defined]
    try:
        clerk = shop_user("clerk", "view_order", "change_order", runs=("view_workflowrun",))
        assert "start_orderfulfilment" in start_options(clerk)
        for extra in ({}, {"confirm": "yes"}):
            response = act(clerk, "start_orderfulfilment", [ada], **extra)
            assert response.status_code == 302
        said = messages_of(clerk.get(orders_url()))
        assert any("Nothing started: starting OrderFulfilment needs the change permission" in m for m in said), said
        assert WorkflowRun.objects.count() == 0
    finally:
        del model_admin.has_pgflow_start_permission


def test_an_admin_may_hide_the_start_action_from_more_users():
    order()
    model_admin = admin.site._registry[Order]
    model_admin.has_pgflow_start_permission = lambda request: request.user.is_superuser  # type: ignore[attr-defined]
    try:
        operator = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
        assert start_options(operator) == []
    finally:
        del model_admin.has_pgflow_start_permission


def test_the_dashboard_patches_no_class_of_djangos():
    # The menu's check is StartWorkflowMixin's: Django's ModelAdmin stays as Django ships it.
    assert not hasattr(admin.ModelAdmin, "has_pgflow_start_permission")


def test_an_admin_with_the_start_action_needs_the_mixin_and_djangos_check_says_so():
    """A project's own admin without StartWorkflowMixin is named at start-up (Django's
    admin.E129, in `manage.py check` and every command), never a broken list page."""

    class Bare(admin.ModelAdmin):
        actions = [start_workflow_action(OrderFulfilment)]

    class Mixed(StartWorkflowMixin, admin.ModelAdmin):
        actions = [start_workflow_action(OrderFulfilment)]

    site = admin.AdminSite(name="probe")
    errors = Bare(Order, site).check()
    assert [error.id for error in errors] == ["admin.E129"]
    assert "has_pgflow_start_permission" in errors[0].msg
    assert Mixed(Order, site).check() == []


def test_the_start_action_asks_for_the_workflows_input_form():
    ada = order()
    client = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
    page = act(client, "start_refundapproval", [ada])
    assert 'name="pgflow_input-amount_cents"' in page.content.decode()
    refused = act(client, "start_refundapproval", [ada], confirm="yes", **{"pgflow_input-amount_cents": "-5"})
    assert refused.status_code == 400
    assert "greater than or equal to 1" in refused.content.decode()
    assert WorkflowRun.objects.count() == 0
    act(client, "start_refundapproval", [ada], confirm="yes", **{"pgflow_input-amount_cents": "500"})
    run = RefundApproval.runs().get()
    assert run.input == {"amount_cents": 500} and run.subject == ada and run.key is None


def test_the_start_action_without_input_takes_json_and_warns_of_open_runs():
    from pgflow_dashboard.admin import start_workflow_action

    action = start_workflow_action(wf.Delayed)
    model_admin = admin.site._registry[Order]
    model_admin.actions = [*model_admin.actions, action]
    try:
        ada = order()
        wf.Delayed.start(subject=ada)
        client = shop_user("operator", "view_order", "change_order", runs=("view_workflowrun", "change_workflowrun"))
        page = act(client, "start_delayed", [ada])
        text = " ".join(page.content.decode().split())
        assert "1 of them already has an open Delayed run, and without a key this starts another" in text
        assert 'name="pgflow_input-input"' in text
        bad = act(client, "start_delayed", [ada], confirm="yes", **{"pgflow_input-input": "[1]"})
        assert bad.status_code == 400 and "the input must be a JSON object" in bad.content.decode()
        act(client, "start_delayed", [ada], confirm="yes", **{"pgflow_input-input": '{"why": "again"}'})
        assert [run.input for run in wf.Delayed.runs().order_by("pk")] == [{}, {"why": "again"}]
    finally:
        model_admin.actions = [a for a in model_admin.actions if a is not action]


def test_start_workflow_action_refuses_what_is_not_a_workflow():
    from pgflow_dashboard.admin import start_workflow_action

    with pytest.raises(TypeError, match="takes a pgflow.Workflow subclass, got 'Checkout'"):
        start_workflow_action("Checkout")  # type: ignore[arg-type]


# --- the run list and the run page ------------------------------------------------------------


def test_the_run_list_filters_by_subject_type_and_finds_a_subject_id():
    ada = order()
    user = User.objects.create_user("subject-user")
    of_order = wf.Delayed.start(subject=ada)
    of_user = wf.Delayed.start(subject=user)
    wf.Delayed.start()
    client = shop_user("viewer", runs=("view_workflowrun",))
    page = client.get(changelist_url())
    assert "By subject type" in page.content.decode() or "subject type" in page.content.decode()
    assert "shop.order" in page.content.decode() and "auth.user" in page.content.decode()

    def listed(query: dict[str, str]) -> set[int]:
        found = client.get(changelist_url(), query)
        assert found.status_code == 200
        return {run.pk for run in found.context["cl"].result_list}

    order_type = ContentType.objects.get_for_model(Order)
    assert listed({"subject_type": str(order_type.pk)}) == {of_order.pk}
    assert listed({"subject_type": "auth.user"}) == {of_user.pk}
    assert listed({"subject_type": "nonsense"}) == set()
    assert listed({"subject_type": str(order_type.pk), "q": str(ada.pk)}) == {of_order.pk}


def test_the_run_list_links_a_subject_to_its_admin_page_when_it_has_one():
    ada = order()
    session = Session.objects.create(session_key="a-text-key", session_data="", expire_date=timezone.now())
    wf.Delayed.start(subject=ada)
    wf.Delayed.start(subject=session)  # sessions have no admin page
    page = shop_user("viewer", runs=("view_workflowrun",)).get(changelist_url()).content.decode()
    assert f'<a href="{order_url(ada)}">shop.order #{ada.pk}</a>' in page
    assert '<td class="field-subject_label">sessions.session #a-text-key</td>' in page
    assert [run.subject for run in pgflow.runs_for(session)] == [session]  # a text primary key


def test_the_run_page_links_to_its_subjects_admin_page():
    ada = order()
    run = wf.Delayed.start(subject=ada)
    page = shop_user("viewer", "view_order", runs=("view_workflowrun",)).get(run_url(run))
    assert f'<a href="{order_url(ada)}">{ada}</a>' in page.content.decode()
