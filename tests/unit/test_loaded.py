"""store.rows.loaded and deferred: model instances built positionally, as Django loads a
row: equal field by field to Django's own keyword construction, or with only the fields
given loaded (no database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from pgflow.core.states import StepStatus
from pgflow.models import Event, Step, WorkflowRun
from pgflow.store.rows import deferred, loaded

AT = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)


def fields(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (
            Step,
            {
                "id": 7,
                "run_id": 3,
                "step_name": "one",
                "attempt": 2,
                "status": StepStatus.IN_PROGRESS,
                "started_at": AT,
                "claim_token": uuid.uuid4(),
            },
        ),
        (WorkflowRun, {"id": 3, "workflow_class": "a.B", "input": {"x": 1}, "created_at": AT, "parent_id": None}),
        (Event, {"run_id": 3, "event": "started"}),
    ],
)
def test_an_instance_has_the_values_given_and_the_defaults_django_gives(model, values):
    built = loaded(model, values)
    assert fields(built) == fields(model(**values))
    assert (built._state.adding, built._state.db) == (False, "default")


def test_a_callable_default_is_made_anew_for_each_instance():
    first, second = loaded(WorkflowRun, {"id": 1}), loaded(WorkflowRun, {"id": 2})
    assert first.input == {} and first.input is not second.input


def test_a_name_that_is_not_a_field_is_refused():
    with pytest.raises(KeyError, match="nope"):
        loaded(Step, {"nope": 1})


def test_a_deferred_instance_holds_only_the_fields_given():
    values = {"claim_token": uuid.uuid4(), "id": 7, "step_name": "one", "run_id": 3, "attempt": 2}  # any order
    built = deferred(Step, values)
    assert {name: getattr(built, name) for name in values} == values
    assert built.get_deferred_fields() == {f.attname for f in Step._meta.concrete_fields} - values.keys()
    assert (built._state.adding, built._state.db) == (False, "default")


def test_a_deferred_instance_is_what_djangos_from_db_makes():
    values = {"id": 3, "workflow_class": "a.B", "input": {"x": 1}, "created_at": AT, "parent_id": None}
    built = deferred(WorkflowRun, values)
    names = [f.attname for f in WorkflowRun._meta.concrete_fields if f.attname in values]
    django_made = WorkflowRun.from_db("default", names, [values[name] for name in names])
    assert {k: v for k, v in vars(built).items() if k != "_state"} == {
        k: v for k, v in vars(django_made).items() if k != "_state"
    }
    assert built.get_deferred_fields() == django_made.get_deferred_fields()
    assert built.parent is None  # a foreign key's descriptor reads the attname given


def test_a_deferred_instance_sends_post_init_to_a_receiver():
    # Built without Django's __init__ only while nothing listens: a project's receiver
    # (an audit, a cache) still sees every instance.
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append((sender, instance.step_name))

    post_init.connect(receiver, sender=Step)
    try:
        deferred(Step, {"id": 7, "run_id": 3, "step_name": "one"})
    finally:
        post_init.disconnect(receiver, sender=Step)
    assert seen == [(Step, "one")]


@pytest.mark.parametrize("listened", [False, True])
def test_values_kept_apart_are_loaded_as_the_others(listened):
    # Claim.run() passes the run's id apart from the claim's fields (not copied to add it):
    # a receiver of post_init sees it, and so does the instance built without __init__.
    from django.db.models.signals import post_init

    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.__dict__.get("id"))

    fields = {"workflow_class": "shop.Orders", "status": "running"}
    if listened:
        post_init.connect(receiver, sender=WorkflowRun)
    try:
        built = deferred(WorkflowRun, fields, id=12)
    finally:
        post_init.disconnect(receiver, sender=WorkflowRun)
    assert (built.pk, built.workflow_class, built.status) == (12, "shop.Orders", "running")
    assert "id" not in built.get_deferred_fields() and "id" not in fields
    assert seen == ([12] if listened else [])


@pytest.mark.parametrize("build", [loaded, deferred])
def test_an_instance_belongs_to_pgflows_database(build, settings):
    # A body's self.run.refresh_from_db() or .save() goes where the row came from: with
    # PGFLOW["DATABASE"] elsewhere, the project's default database holds no pgflow table.
    settings.PGFLOW = {**getattr(settings, "PGFLOW", {}), "DATABASE": "pgflow_own"}
    run = build(WorkflowRun, {"id": 3, "workflow_class": "a.B"})
    assert run._state.db == "pgflow_own"
    assert not run._state.adding


def test_a_template_writes_its_constants_into_the_sql_and_keeps_what_varies():
    from django.db.models.expressions import RawSQL

    from pgflow.store.rows import Insert

    event = Event(
        run_id=RawSQL("(SELECT 1)", []), step=None, event="started", actor="100%s sure", details={}, created_at=AT
    )
    template = Insert.of(event).template(event, "details")
    assert "NULL, 'started', '100%%s sure'" in template.sql  # a literal's % escaped for psycopg
    assert template.sql.count("%s") - template.sql.count("%%s") == len(template.params(details={"a": 1})) == 2
    assert template.varying.keys() == {"details"}
