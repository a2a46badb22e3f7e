"""store.claims_of builds each Claim without its __init__: the claim it builds must be the
one the constructor would, field for field, and stay frozen and hashable."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from pgflow.store.claims import NOT_READ, Claim, claims_of
from pgflow.store.rows import RUN_COLUMNS, STEP_COLUMNS

AT = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _row(*, input_: str = '{"order": 7}', outputs: str | None = '{"a": {"order": 7}}') -> tuple:
    run = dict.fromkeys(RUN_COLUMNS)
    run.update(workflow_class="shop.Orders", status="running", input=input_, attributes="{}", created_at=AT)
    step = dict.fromkeys(STEP_COLUMNS)
    step.update(created_at=AT, scheduled_at=AT, queue="default")
    token = uuid.UUID(int=5)
    return (11, 3, "b", 2, token, AT, *run.values(), *step.values(), outputs)


def test_a_claim_from_a_row_is_the_constructors_claim() -> None:
    (built,) = claims_of([_row()])
    made = Claim(
        step_id=11,
        run_id=3,
        step_name="b",
        attempt=2,
        token=uuid.UUID(int=5),
        started_at=AT,
        run_fields={
            **dict.fromkeys(RUN_COLUMNS),
            "workflow_class": "shop.Orders",
            "status": "running",
            "input": {"order": 7},
            "attributes": {},
            "created_at": AT,
        },
        step_fields={
            "created_at": AT,
            "scheduled_at": AT,
            "waiting_since": None,
            "queue": "default",
            "throttled_until": None,
        },
        outputs={"a": {"order": 7}},
    )
    assert vars(built) == vars(made)
    assert set(vars(built)) == {field.name for field in dataclasses.fields(Claim)}
    assert built.subject is NOT_READ
    assert built == made and hash(built) == hash(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.attempt = 3  # type: ignore[misc]


def test_outputs_not_read_stay_none() -> None:
    (built,) = claims_of([_row(outputs=None)])
    assert built.outputs is None
