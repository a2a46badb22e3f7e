"""Workflows that read the current tenant's notes in their body, a condition, a wait and an
async body: each must see its own tenant's rows only."""

from __future__ import annotations

from datetime import timedelta

from asgiref.sync import sync_to_async

import pgflow
from pgflow import step

from .notes.models import Note


def notes() -> list[str]:
    return sorted(Note.objects.values_list("text", flat=True))


class ReadsNotes(pgflow.Workflow):
    @pgflow.cancel_if
    def no_notes(self) -> bool:
        return not Note.objects.exists()  # the public schema has no notes table: it would raise

    def waited(self) -> timedelta:
        Note.objects.create(text=f"wait of run {self.run.pk}")  # written in the run's own schema
        return timedelta(0)

    def nothing_to_read(self) -> bool:
        return Note.objects.count() == 0

    @step
    def body(self) -> dict[str, list[str]]:
        return {"notes": notes()}

    @step(wait="waited", skip_if="nothing_to_read")
    def after_wait(self) -> dict[str, list[str]]:
        return {"notes": notes()}

    @step
    async def async_body(self) -> dict[str, list[str]]:
        return {"notes": sorted([note.text async for note in Note.objects.all()])}

    @step
    async def async_through_sync(self) -> dict[str, list[str]]:
        return {"notes": await sync_to_async(notes)()}
