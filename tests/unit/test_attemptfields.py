"""One list of an attempt's columns for every reader: the run page reads it, ``pgflow show``
and the MCP's ``get_run`` tell the same columns less what the page reads only to draw."""

from __future__ import annotations

from pgflow.cli import show
from pgflow.core import attemptfields
from pgflow.models import Step
from pgflow_dashboard import runpage
from pgflow_dashboard.mcp import reads


def test_the_run_page_reads_the_shared_columns():
    assert runpage.STEP_FIELDS is attemptfields.STEP_FIELDS
    assert runpage.GATE_FIELDS is attemptfields.GATE_FIELDS


def test_every_column_is_one_of_the_attempt_rows():
    columns = {field.attname for field in Step._meta.concrete_fields}
    assert set(attemptfields.STEP_FIELDS) <= columns, set(attemptfields.STEP_FIELDS) - columns
    assert attemptfields.NOT_SHOWN <= set(attemptfields.STEP_FIELDS)
    assert len(set(attemptfields.STEP_FIELDS)) == len(attemptfields.STEP_FIELDS)


def test_show_and_the_mcp_tell_every_column_but_the_drawing_ones():
    told = [name for name in attemptfields.STEP_FIELDS if name not in attemptfields.NOT_SHOWN]
    assert list(show.ATTEMPT_FIELDS) == told
    assert "throttled_until" in told and "worker" in told and "lease_expires_at" not in told
    errors = set(attemptfields.ERROR_FIELDS)
    assert list(reads.ATTEMPT_FIELDS) == [name for name in told if name != "id" and name not in errors]
