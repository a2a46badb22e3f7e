"""A schedule made in the admin for a tenant, over HTTP: the add form's tenant field (any
tenant key, checked as ``pgflow.tenants`` checks one; a user restricted by
PGFLOW["TENANT_VISIBLE"] chooses among their own tenants), the Schedules list's tenant
column, and its ticks, fired by the worker's tick claim, starting runs of that tenant whose
code runs in that tenant's context."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils.html import escape

from pgflow import schedules
from pgflow.exceptions import DefinitionError
from pgflow.models import Schedule, WorkflowRun
from pgflow.testing import run_workflow
from tests import tenant_workflows as tw
from tests.dashboard_support import make_user

pytestmark = pytest.mark.django_db(transaction=True)
pytest_plugins = ["tests.dashboard_fixtures"]  # the login fixture

PERMS = ("view_workflowrun", "change_workflowrun", "view_schedule", "change_schedule", "add_schedule")
TENANTS = {
    "TENANT": "tests.tenant_workflows.current_tenant",
    "TENANT_CONTEXT": "tests.tenant_workflows.entered",
    "TENANT_VISIBLE": "tests.tenant_workflows.visible_tenants",
}


@pytest.fixture
def tenanted(settings):
    settings.PGFLOW = {**settings.PGFLOW, **TENANTS}
    tw.ENTERED.clear()
    tw.NOTES.clear()
    Schedule.objects.all().delete()  # only the schedules made here tick below


def add_form(**fields: str) -> dict[str, str]:
    data = {
        "workflow_class": tw.Seen.workflow_path(),
        "name": "acme-quarterly",
        "cron": "",
        "every": "00:15:00",
        "timezone": "UTC",
        "input": "{}",
        "overlap": "allow",
        "catch_up": "",
        "tenant": "acme",
    }
    data.update(fields)
    return data


def add(client, **fields: str):
    return client.post(reverse("admin:pgflow_schedule_add"), add_form(**fields))


def test_an_admin_made_schedule_ticks_runs_of_its_tenant(login, tenanted):
    client = login(make_user("scheduler", perms=PERMS))
    form = client.get(reverse("admin:pgflow_schedule_add")).content.decode()
    assert 'name="tenant"' in form
    assert add(client).status_code == 302
    assert add(client, name="untenanted", tenant="").status_code == 302
    row, plain = Schedule.objects.get(name="acme-quarterly"), Schedule.objects.get(name="untenanted")
    assert (row.origin, row.tenant, plain.tenant) == ("admin", "acme", None)

    listing = client.get(reverse("admin:pgflow_schedule_changelist")).content.decode()
    assert re.search(r'<th scope="col" class="sortable column-tenant_label">.*?Tenant</a>', listing, re.S)
    assert '<td class="field-tenant_label">acme</td>' in listing
    assert '<td class="field-tenant_label">—</td>' in listing
    edit = client.get(reverse("admin:pgflow_schedule_change", args=[row.pk])).content.decode()
    assert re.search(r'name="tenant"[^>]*value="acme"|value="acme"[^>]*name="tenant"', edit)

    # The worker's tick claim, where another tenant is current: the run is acme's all the same.
    with tw.as_tenant("globex"):
        started = schedules.fire_due(now=row.next_tick_at)
    ticked = WorkflowRun.objects.get(key=schedules.run_key(row.pk, row.next_tick_at))
    assert ticked.tenant == "acme"
    assert WorkflowRun.objects.get(key=schedules.run_key(plain.pk, plain.next_tick_at)).tenant == "globex"
    assert started == 2  # runs started
    assert run_workflow(ticked).outputs == {"first": {"tenant": "acme"}, "second": {"tenant": "acme"}}
    assert set(tw.ENTERED) == {"acme"}


@pytest.mark.parametrize(
    ("posted", "said"),
    [
        ("x" * 101, "tenant must be a non-empty string of at most 100 characters, got 'xxx"),
        ("a\x00b", "holds a NUL character"),
    ],
    ids=["too long", "NUL"],
)
def test_the_form_refuses_what_is_no_tenant_key_on_the_field(login, tenanted, posted, said):
    page = add(login(make_user("scheduler", perms=PERMS)), tenant=posted)
    assert page.status_code == 200  # the form again, naming the field
    errors = page.context["adminform"].form.errors
    assert list(errors) == ["tenant"] and said in errors["tenant"][0]
    assert escape(said) in page.content.decode()
    assert not Schedule.objects.exists()


def test_a_restricted_user_chooses_among_their_own_tenants(login, tenanted):
    client = login(make_user("acme-scheduler", perms=PERMS))
    form = client.get(reverse("admin:pgflow_schedule_add")).content.decode()
    select = re.search(r'<select name="tenant"[^>]*>(.*?)</select>', form, re.S)
    assert select and re.findall(r'<option value="([^"]*)"', select.group(1)) == ["acme"]
    refused = add(client, tenant="globex")
    assert refused.status_code == 200
    (message,) = refused.context["adminform"].form.errors["tenant"]
    assert message == "your user does not see the runs of tenant 'globex' (the tenants you see: acme)"
    assert "tenant" in add(client, tenant="").context["adminform"].form.errors  # their runs: a tenant's
    assert add(client).status_code == 302
    assert Schedule.objects.get().tenant == "acme"


def test_a_schedule_saved_outside_the_form_refuses_a_bad_tenant(tenanted):
    with pytest.raises(DefinitionError, match="Schedule 'n': tenant must be a non-empty string"):
        schedules.save(Schedule(workflow_class=tw.Seen.workflow_path(), name="n", every=timedelta(hours=1), tenant=""))
    assert not Schedule.objects.exists()


def test_a_restricted_user_sees_and_acts_on_their_tenants_schedules_only(login, tenanted):
    """The Schedules list is filtered as the run list is (PGFLOW["TENANT_VISIBLE"]): another
    tenant's schedule, or one of no tenant, is neither listed, nor opened, nor acted on."""
    made = {}
    for name, tenant in (("acme hourly", "acme"), ("globex hourly", "globex"), ("shared hourly", None)):
        made[name] = Schedule(
            workflow_class=tw.Seen.workflow_path(), name=name, every=timedelta(hours=1), tenant=tenant
        )
        schedules.save(made[name])
    listing_url = reverse("admin:pgflow_schedule_changelist")

    def listed(client) -> list[str]:
        return sorted(
            re.findall(r'<th class="field-name"><a href="[^"]*">([^<]+)</a>', client.get(listing_url).content.decode())
        )

    everyone = login(make_user("scheduler", perms=PERMS))
    assert listed(everyone) == ["acme hourly", "globex hourly", "shared hourly"]
    acme = login(make_user("acme-scheduler", perms=PERMS))
    assert listed(acme) == ["acme hourly"]
    theirs = made["globex hourly"]
    assert acme.get(reverse("admin:pgflow_schedule_change", args=[theirs.pk])).status_code == 302  # "doesn't exist"
    posted = {"action": "pause_schedules", "_selected_action": [s.pk for s in made.values()]}
    assert acme.post(listing_url, posted).status_code == 302
    paused = dict(Schedule.objects.values_list("name", "paused"))
    assert paused == {"acme hourly": True, "globex hourly": False, "shared hourly": False}
