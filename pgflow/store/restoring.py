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
from .locking import now


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
        # The runs it named may be gone for good: a link to none would fail the foreign key.
        for link in ("parent_id", "rerun_of_id"):
            if getattr(row, link) is not None and not WorkflowRun.objects.filter(pk=getattr(row, link)).exists():
                setattr(row, link, None)
        row.finished_at = now()
        row.save(force_insert=True)
        # Their foreign keys are checked at commit (DEFERRABLE), so the order of the inserts is free.
        Signal.objects.bulk_create([_instance(Signal, signal) for signal in record["signals"]])
        Batch.objects.bulk_create([_instance(Batch, batch) for batch in record["batches"]])
        Step.objects.bulk_create([_instance(Step, step) for step in record["steps"]])
        BatchMember.objects.bulk_create(
            [_instance(BatchMember, member, child=False) for batch in record["batches"] for member in batch["members"]]
        )
        Event.objects.bulk_create([_instance(Event, event) for event in record["events"]])
    return WorkflowRun.objects.get(pk=run_id)


def _instance(model: type[models.Model], values: dict[str, Any], *, child: bool = True) -> Any:
    """``model`` from an archived row's columns by attname (the extras, such as a batch's
    ``members``, left out); values are converted as a form's would be (``to_python``)."""
    fields = {field.attname: field for field in model._meta.concrete_fields}
    kept = {name: fields[name].to_python(value) for name, value in values.items() if name in fields}
    if not child and kept.get("child_id") is not None and not WorkflowRun.objects.filter(pk=kept["child_id"]).exists():
        kept["child_id"] = None  # a member's child run purged and not restored
    return model(**kept)
