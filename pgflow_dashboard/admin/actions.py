"""``start_workflow_action(Checkout, input=…, key=…)``: an admin action that starts a
workflow for each selected object, its subject.

``actions = [start_workflow_action(Checkout, key=lambda order: f"checkout-{order.pk}")]``
on any ``ModelAdmin``. Choosing it shows a confirmation page first: how many runs would
start, how many objects already have a run with that key (an idempotency key makes a
second click, or a second operator, harmless: that start returns the run it finds and
starts nothing), and the input. Confirmed, each start is ``Checkout.start(subject=obj,
input=…, key=…, actor=request.user)`` (the user is the run's requester: an approval with
``self_approval=False`` refuses them) and the message links to every run started or found.

``input`` and ``key`` are values or callables of the object. The input form: the
workflow's ``input_form`` (a ``django.forms.Form`` class) when it declares one, whose
cleaned values are added to each object's input; else, when no ``input`` is given, a JSON
object typed on the page (the same for every run). Starting needs the change permission on
runs (``pgflow.change_workflowrun``): the action is in the menu only of users who have it,
and the permission is checked again when the action is chosen and when it is confirmed.

The menu asks the admin: Django shows an action with ``allowed_permissions`` only when the
page's ``ModelAdmin.has_<permission>_permission(request)`` is true, so an admin listing the
action takes :class:`StartWorkflowMixin` (``class OrderAdmin(StartWorkflowMixin,
admin.ModelAdmin)``), which answers ``has_pgflow_start_permission``; an admin may override it
to hide the action from more users. One without it fails Django's system check (admin.E129)
at start-up. Django's own ``ModelAdmin`` is left as Django ships it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.contenttypes.models import ContentType
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from pgflow import Workflow, db
from pgflow.core.states import OPEN_RUN
from pgflow.exceptions import PgflowError
from pgflow.models import WorkflowRun

from ..forms import RerunForm

MAX_STARTS = 1000  # objects one action starts for; more is refused as a whole, nothing started
MAX_LISTED = 50  # runs the message names one by one
PERMISSION = "pgflow.change_workflowrun"
# The action's allowed_permissions: Django shows it only when the admin's
# has_pgflow_start_permission (StartWorkflowMixin's) is true.
SHOWN_TO = "pgflow_start"

Computed = Any | Callable[[Any], Any]


class InputForm(RerunForm):
    """The input typed on the confirmation page when the workflow declares no ``input_form``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["input"].help_text = 'a JSON object given to every run started, e.g. {"priority": "high"}'


def start_workflow_action(
    workflow: type[Workflow], *, input: Computed = None, key: Computed = None, description: str | None = None
) -> Callable[[admin.ModelAdmin, HttpRequest, QuerySet[Any]], HttpResponse | None]:
    """An admin action starting ``workflow`` for each selected object (see the module)."""
    if not (isinstance(workflow, type) and issubclass(workflow, Workflow)):
        raise TypeError(f"start_workflow_action() takes a pgflow.Workflow subclass, got {workflow!r}")
    form_class = getattr(workflow, "input_form", None)
    if form_class is not None and not (isinstance(form_class, type) and issubclass(form_class, forms.Form)):
        raise TypeError(f"{workflow.__name__}.input_form must be a django.forms.Form subclass, got {form_class!r}")
    name = f"start_{workflow.__name__.lower()}"

    def action(model_admin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        return _start(model_admin, request, queryset, workflow, input=input, key=key, name=name)

    action.__name__ = name
    action.__qualname__ = name
    return admin.action(
        description=description or f"Start {workflow.__name__} for the selected %(verbose_name_plural)s…",
        permissions=[SHOWN_TO],
    )(action)


class StartWorkflowMixin:
    """For a ``ModelAdmin`` whose ``actions`` hold a ``start_workflow_action``: Django asks the
    page's admin ``has_pgflow_start_permission`` (the action's ``allowed_permissions``) before
    it lists the action. Put it before ``admin.ModelAdmin`` in the bases."""

    def has_pgflow_start_permission(self, request: HttpRequest) -> bool:
        """Whether the start actions show in this admin's action menu: the user may start runs."""
        return bool(request.user.has_perm(PERMISSION))


class _Plan:
    """One selected object: what its start would be, or why it cannot start."""

    def __init__(self, obj: Model, *, input: dict[str, Any] | None, key: str | None, problem: str | None) -> None:
        self.obj = obj
        self.input = input
        self.key = key
        self.problem = problem
        self.existing: WorkflowRun | None = None  # the run holding its key already
        self.open_runs = 0  # open runs of the class on this subject (when there is no key)


def _start(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    workflow: type[Workflow],
    *,
    input: Computed,
    key: Computed,
    name: str,
) -> HttpResponse | None:
    label = workflow.__name__
    # Hidden from users without it (SHOWN_TO); asked again here, whatever an admin's own check says.
    if not request.user.has_perm(PERMISSION):
        model_admin.message_user(
            request,
            f"Nothing started: starting {label} needs the change permission on workflow runs ({PERMISSION}).",
            messages.ERROR,
        )
        return None
    selected = queryset.count()
    if selected > MAX_STARTS:
        model_admin.message_user(
            request,
            f"Nothing started: {selected:,} objects are selected and one action starts at most {MAX_STARTS:,}.",
            messages.ERROR,
        )
        return None
    objects = list(queryset.order_by("pk"))
    plans = [_plan(obj, input, key) for obj in objects]
    _find_existing(workflow, plans)
    form_class = getattr(workflow, "input_form", None) or (InputForm if input is None else None)
    confirmed = request.POST.get("confirm") == "yes"
    form = None
    if form_class is not None:
        form = form_class(request.POST if confirmed else None, prefix="pgflow_input")
    if not confirmed or (form is not None and not form.is_valid()):
        return _confirmation_page(model_admin, request, workflow, plans, form=form, name=name, input=input, key=key)
    typed = _json_ready(form.cleaned_data) if form is not None else {}
    if form_class is InputForm:
        typed = typed.get("input") or {}
    started: list[tuple[Model, WorkflowRun]] = []
    found: list[tuple[Model, WorkflowRun]] = []
    refused: list[str] = []
    for plan in plans:
        if plan.problem:
            refused.append(f"{plan.obj}: {plan.problem}")
            continue
        if plan.existing is not None:
            found.append((plan.obj, plan.existing))
            continue
        try:
            run = workflow.start(
                subject=plan.obj, input={**(plan.input or {}), **typed}, key=plan.key, actor=request.user
            )
        except (PgflowError, TypeError, ValueError) as exc:
            refused.append(f"{plan.obj}: {exc}")
        else:
            started.append((plan.obj, run))
    site = model_admin.admin_site
    if started:
        model_admin.message_user(
            request,
            format_html("Started {} of {}: {}.", _runs(len(started)), label, _links(site, started)),
            messages.SUCCESS,
        )
    if found:
        model_admin.message_user(
            request,
            format_html(
                "Not started again, a run with that key exists: {} ({}).",
                _links(site, found),
                _runs(len(found)),
            ),
            messages.INFO,
        )
    if refused:
        model_admin.message_user(request, f"Not started: {'; '.join(refused[:MAX_LISTED])}.", messages.WARNING)
    return None


def _plan(obj: Model, input: Computed, key: Computed) -> _Plan:
    try:
        value = input(obj) if callable(input) else input
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"the input must be a dict, got {type(value).__name__}")
        chosen = key(obj) if callable(key) else key
        if chosen is not None and not isinstance(chosen, str):
            raise TypeError(f"the key must be a string or None, got {type(chosen).__name__}")
    except Exception as exc:  # the user's callable: its failure is this object's, not the page's
        return _Plan(obj, input=None, key=None, problem=f"{type(exc).__name__}: {exc}")
    return _Plan(obj, input=value, key=chosen, problem=None)


def _find_existing(workflow: type[Workflow], plans: list[_Plan]) -> None:
    """The runs already holding the plans' keys (one query), and, for plans without a key,
    how many open runs of the class each subject has (one query)."""
    keyed = {plan.key: plan for plan in plans if plan.key is not None and not plan.problem}
    if keyed:
        for run in WorkflowRun.objects.for_class(workflow).filter(key__in=list(keyed)):
            keyed[str(run.key)].existing = run
    unkeyed = {str(plan.obj.pk): plan for plan in plans if plan.key is None and not plan.problem}
    if unkeyed:
        model = type(next(iter(unkeyed.values())).obj)
        subject_type = ContentType.objects.db_manager(db.alias()).get_for_model(model)
        open_runs = WorkflowRun.objects.for_class(workflow).filter(
            subject_type=subject_type, subject_id__in=list(unkeyed), status__in=list(OPEN_RUN)
        )
        for subject_id in open_runs.values_list("subject_id", flat=True):
            unkeyed[str(subject_id)].open_runs += 1


def _confirmation_page(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    workflow: type[Workflow],
    plans: list[_Plan],
    *,
    form: forms.Form | None,
    name: str,
    input: Computed,
    key: Computed,
) -> TemplateResponse:
    site = model_admin.admin_site
    would = [plan for plan in plans if not plan.problem and plan.existing is None]
    existing = [plan for plan in plans if plan.existing is not None]
    sample = next((plan.input for plan in would if plan.input is not None), None)
    request.current_app = site.name
    context = {
        **site.each_context(request),
        "title": f"Start {workflow.__name__}?",
        "opts": model_admin.opts,
        "workflow": workflow.__name__,
        "workflow_path": workflow.workflow_path(),
        "selected": [plan.obj.pk for plan in plans],
        "would": would[:MAX_LISTED],
        "would_count": len(would),
        "existing": [(plan, _run_url(site, plan.existing)) for plan in existing[:MAX_LISTED]],
        "existing_count": len(existing),
        "existing_open": sum(1 for plan in existing if plan.existing and plan.existing.status in OPEN_RUN),
        "already_open": sum(1 for plan in would if plan.open_runs),
        "problems": [plan for plan in plans if plan.problem][:MAX_LISTED],
        "keyed": key is not None,
        "input_kind": "callable" if callable(input) else ("fixed" if input is not None else "typed"),
        "sample_input": json.dumps(sample, indent=2, cls=DjangoJSONEncoder) if sample is not None else None,
        "form": form,
        "action": name,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    status = 400 if form is not None and form.is_bound and form.errors else 200
    return TemplateResponse(request, "admin/pgflow_dashboard/start_confirm.html", context, status=status)


def _json_ready(data: dict[str, Any]) -> dict[str, Any]:
    # A form's cleaned values may be dates, decimals, model instances' keys: stored as JSON text.
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def _run_url(site: admin.AdminSite, run: WorkflowRun | None) -> str | None:
    if run is None:
        return None
    try:
        return reverse(f"{site.name}:pgflow_workflowrun_change", args=[run.pk])
    except NoReverseMatch:
        return None


def _links(site: admin.AdminSite, pairs: list[tuple[Model, WorkflowRun]]) -> str:
    shown = pairs[:MAX_LISTED]
    links = format_html_join(
        ", ",
        '<a href="{}">#{}</a> ({})',
        ((_run_url(site, run) or "#", run.pk, str(obj)) for obj, run in shown),
    )
    more = len(pairs) - len(shown)
    return format_html("{} and {} more", links, more) if more > 0 else links


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
