"""Bringing an archived run back (``manage.py pgflow_archive restore``): its row, attempts,
events, signals and batches as the archive holds them (:mod:`pgflow.archive`), in one
transaction. The run comes back ended, as it was archived; its ``finished_at`` becomes now,
so retention keeps it for another ``RETENTION`` (and archives it again after that).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .. import db
from ..models import Batch, BatchMember, Event, Signal, Step, WorkflowRun
from . import links
from .locking import now

_LINKS = ("parent_id", "rerun_of_id")  # a run's links to other runs (pgflow.store.links)


class AlreadyThere(Exception):
    """The run is in the database: nothing to restore."""


def restore(record: dict[str, Any]) -> WorkflowRun:
    """Insert the archived ``record`` (one line of an archive file) under its own ids."""
    values = record["run"]
    run_id = values["id"]
    with db.atomic():
        if WorkflowRun.objects.filter(pk=run_id).exists():
            raise AlreadyThere(f"run {run_id} is in the database: nothing to restore")
        row = _instance(WorkflowRun, values)
        named = [getattr(row, link) for link in _LINKS] + [
            member.get("child_id") for batch in record["batches"] for member in batch["members"]
        ]
        # The runs it named may be gone for good: its links to those are dropped, the others held.
        kept = links.held_runs(linked for linked in named if linked is not None)
        for link in _LINKS:
            if getattr(row, link) not in kept:
                setattr(row, link, None)
        row.finished_at = now()
        row.save(force_insert=True)
        # Their foreign keys are checked at commit (DEFERRABLE), so the order of the inserts is free.
        Signal.objects.bulk_create([_instance(Signal, signal) for signal in record["signals"]])
        Batch.objects.bulk_create([_instance(Batch, batch) for batch in record["batches"]])
        Step.objects.bulk_create([_instance(Step, step) for step in record["steps"]])
        BatchMember.objects.bulk_create(
            [_instance(BatchMember, member, kept=kept) for batch in record["batches"] for member in batch["members"]]
        )
        Event.objects.bulk_create([_instance(Event, event) for event in record["events"]])
    return WorkflowRun.objects.get(pk=run_id)


def _instance(model: type[models.Model], values: dict[str, Any], *, kept: set[int] | None = None) -> Any:
    """``model`` from an archived row's columns by attname (the extras, such as a batch's
    ``members``, left out); values are converted as a form's would be (``to_python``). With
    ``kept`` (a batch member), a child run not among those is dropped: purged, not restored."""
    fields = {field.attname: field for field in model._meta.concrete_fields}
    columns = {name: fields[name].to_python(value) for name, value in values.items() if name in fields}
    if kept is not None and columns.get("child_id") not in kept:
        columns["child_id"] = None
    return model(**columns)
