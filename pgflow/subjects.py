"""Runs seen from their subject: ``runs_for(obj)`` and the ``RunsRelation`` a model declares
to get ``order.workflow_runs``.

A run stores its subject as a content type and the primary key as text (``subject_type``,
``subject_id``), so any model can be a subject with no column on its own table. The
relation is Django's ``GenericRelation`` over those two columns: nothing in the user's
table, so ``makemigrations`` writes nothing for it; on PostgreSQL Django casts the join
between the text ``subject_id`` and an integer or UUID primary key.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.contenttypes.fields import GenericRelation, ReverseGenericManyToOneDescriptor
from django.contrib.contenttypes.models import ContentType
from django.db import DEFAULT_DB_ALIAS
from django.db.models import ManyToOneRel, Model, QuerySet
from django.utils.functional import cached_property

from . import db
from .models import WorkflowRun


def subject_of(obj: Any) -> tuple[ContentType, str]:
    """The ``(subject_type, subject_id)`` a run started with ``subject=obj`` stores.

    Raises ``TypeError`` for anything but a model instance and ``ValueError`` for an unsaved
    one, as ``Workflow.start(subject=…)`` does.
    """
    if not isinstance(obj, Model):
        raise TypeError(f"runs_for() takes a saved model instance, got {type(obj).__name__}")
    if obj.pk is None:
        raise ValueError(f"runs_for() takes a saved model instance; this {type(obj).__name__} has no primary key")
    # for_concrete_model, as start() stores it: a proxy's runs are its concrete model's.
    # pgflow's database's content type: the run stores its id there.
    return ContentType.objects.db_manager(db.alias()).get_for_model(obj), str(obj.pk)


def runs_for(obj: Any) -> QuerySet[WorkflowRun]:
    """The runs whose subject is ``obj``, newest first, as a queryset (filter, count, …)."""
    subject_type, subject_id = subject_of(obj)
    return WorkflowRun.objects.filter(subject_type=subject_type, subject_id=subject_id).order_by("-created_at", "-id")


class RunsRelation(GenericRelation):
    """``workflow_runs = pgflow.RunsRelation()`` on a model: ``order.workflow_runs`` is a
    manager of the runs whose subject is the order, ``prefetch_related("workflow_runs")``
    reads them for a page of orders in one query, and ``related_query_name="order"`` (when
    given) lets ``WorkflowRun.objects.filter(order__status=…)`` reach back.

    Unlike a stock ``GenericRelation``, deleting the model's row does not delete its runs:
    a run is history (the audit trail of what was done to the order), it may be running
    right now, and only ``pgflow.store`` changes runs. A run whose subject was deleted keeps
    its ``subject_id`` and reads ``run.subject`` as ``None``.

    ``order.workflow_runs.add()``/``create()``/``remove()`` are refused: a run's subject is
    set by ``Workflow.start(subject=…)`` and never changes.
    """

    def __init__(self, *, related_query_name: str | None = None, verbose_name: str | None = None) -> None:
        super().__init__(
            "pgflow.WorkflowRun",
            content_type_field="subject_type",
            object_id_field="subject_id",
            related_query_name=related_query_name,
            verbose_name=verbose_name or "workflow runs",
        )

    def bulk_related_objects(self, objs: list[Model], using: str = DEFAULT_DB_ALIAS) -> QuerySet[WorkflowRun]:
        # The deletion collector asks a generic relation for the rows to delete with objs:
        # none (an empty queryset runs no query), so the runs outlive their subject.
        return WorkflowRun.objects.none()

    def contribute_to_class(self, cls: type[Model], name: str, private_only: bool = False, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, private_only=private_only, **kwargs)
        setattr(cls, self.name, _RunsDescriptor(cast(ManyToOneRel, self.remote_field)))


class _RunsDescriptor(ReverseGenericManyToOneDescriptor):
    """``order.workflow_runs``: the stock generic relation's manager without its writers."""

    @cached_property
    def related_manager_cls(self) -> type[Any]:
        stock = super().related_manager_cls

        def refuse(manager: Any, *args: Any, **kwargs: Any) -> Any:
            raise TypeError(
                f"{manager.instance._meta.label}.{manager.prefetch_cache_name} is read-only: a run's subject "
                "is set by Workflow.start(subject=…) and never changes"
            )

        writers = ("add", "create", "get_or_create", "update_or_create", "remove", "clear", "set")
        return type("RunsManager", (stock,), dict.fromkeys(writers, refuse))
