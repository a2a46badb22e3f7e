"""The fan_out batch builder: what ``batch.add`` records and what it refuses (no database)."""

from __future__ import annotations

import functools
import math
from datetime import datetime

import pytest

from pgflow.fanout import CALLBACK_MESSAGE, BatchBuilder, Member
from tests import fanout_tasks

NEXT_STEP = "do the follow-up work in the next step"


def test_add_records_dotted_paths_with_their_arguments():
    batch = BatchBuilder()
    assert batch.size == 0
    batch.add("tests.fanout_tasks.double", 1)
    batch.add("tests.fanout_tasks.mark", "/tmp/x", text="hi", timeout=30, cluster="other")
    assert batch.size == 2
    assert batch.members == (
        Member(func="tests.fanout_tasks.double", args=(1,), kwargs={}),
        Member(
            func="tests.fanout_tasks.mark", args=("/tmp/x",), kwargs={"text": "hi", "timeout": 30, "cluster": "other"}
        ),
    )


def test_a_callable_is_stored_as_its_module_and_qualname():
    batch = BatchBuilder()
    batch.add(fanout_tasks.double, 2)
    batch.add(fanout_tasks.Tasks.tripled, 3)
    batch.add(fanout_tasks.Tasks.halved, 4)
    assert [m.func for m in batch.members] == [
        "tests.fanout_tasks.double",
        "tests.fanout_tasks.Tasks.tripled",
        "tests.fanout_tasks.Tasks.halved",
    ]


def local_function_factory():
    def inner(n):
        return n

    return inner


@pytest.mark.parametrize(
    "func",
    [
        lambda n: n,
        local_function_factory(),
        fanout_tasks.Tasks().bound,
        functools.partial(fanout_tasks.double, 1),
        fanout_tasks.Tasks(),  # not callable at all
    ],
    ids=["lambda", "local", "bound-method", "partial", "object"],
)
def test_callables_the_worker_cannot_import_are_refused(func):
    with pytest.raises(TypeError) as caught:
        BatchBuilder().add(func)
    message = str(caught.value)
    assert "batch.add() takes a dotted path ('shop.tasks.notify_vendor') or a module-level function" in message
    if callable(func):
        assert "cannot import by its path (a lambda, a function defined inside another" in message


def test_paths_are_checked_the_way_the_django_q2_worker_resolves_them():
    batch = BatchBuilder()
    with pytest.raises(ValueError, match=r"'double' is not a dotted path"):
        batch.add("double")
    with pytest.raises(ValueError, match=r"'tests.fanout_tasks.nothere' does not import .*pydoc.locate"):
        batch.add("tests.fanout_tasks.nothere")
    with pytest.raises(TypeError, match=r"'tests.fanout_tasks.CONSTANT' names a int object, not a function"):
        batch.add("tests.fanout_tasks.CONSTANT")
    with pytest.raises(TypeError, match=r"got int 42"):
        batch.add(42)
    assert batch.size == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (
            (datetime(2024, 1, 1),),
            {},
            "argument 1 must be JSON-serialisable .* got datetime: Object of type datetime is not JSON serializable",
        ),
        ((1, {"when": {1, 2}}), {}, "argument 2 must be JSON-serialisable .* got dict: Object of type set"),
        ((), {"ratio": math.nan}, "keyword argument 'ratio' must be JSON-serialisable .* got float"),
        ((), {"user": object()}, "keyword argument 'user' must be JSON-serialisable .* got object"),
    ],
)
def test_arguments_must_be_json(args, kwargs, message):
    batch = BatchBuilder()
    with pytest.raises(TypeError, match=message):
        batch.add("tests.fanout_tasks.double", *args, **kwargs)
    assert batch.size == 0


@pytest.mark.parametrize("name", ["on_complete", "on_success", "on_failure", "on_finish", "hook"])
def test_the_builder_owns_no_callbacks(name):
    batch = BatchBuilder()
    with pytest.raises(TypeError) as called:
        getattr(batch, name)("tests.fanout_tasks.double")
    assert str(called.value) == f"batch.{name}: {CALLBACK_MESSAGE}"
    assert NEXT_STEP in str(called.value)
    with pytest.raises(TypeError, match=NEXT_STEP):
        setattr(batch, name, fanout_tasks.double)


@pytest.mark.parametrize("name", ["hook", "chain"])
def test_a_task_cannot_carry_its_own_callback(name):
    with pytest.raises(TypeError, match=rf"batch.add\(tests.fanout_tasks.double\): {name}=: .*{NEXT_STEP}"):
        BatchBuilder().add("tests.fanout_tasks.double", 1, **{name: "tests.fanout_tasks.mark"})


@pytest.mark.parametrize("name", ["group", "task_name", "save", "cached", "sync", "ack_failure", "q_options"])
def test_options_pgflow_sets_are_refused_naming_the_accepted_ones(name):
    with pytest.raises(
        TypeError,
        match=rf"{name}= is set by pgflow for every fan_out task; the django-q2 options "
        r"a task may take are timeout=, cluster=",
    ):
        BatchBuilder().add("tests.fanout_tasks.double", 1, **{name: True})


def test_django_q2_options_are_checked():
    batch = BatchBuilder()
    with pytest.raises(
        ValueError,
        match=r"timeout= \(django-q2's\) must be a positive whole number of seconds, "
        r"got 0",
    ):
        batch.add("tests.fanout_tasks.double", 1, timeout=0)
    with pytest.raises(ValueError, match=r"cluster= \(django-q2's\) must be a cluster name, got ''"):
        batch.add("tests.fanout_tasks.double", 1, cluster="")


def test_other_attributes_cannot_be_set():
    with pytest.raises(AttributeError, match=r"no setting 'queue'; add tasks with batch.add\(func, \*args"):
        BatchBuilder().queue = "fast"


def test_a_sealed_builder_refuses_adds():
    batch = BatchBuilder()
    batch.add("tests.fanout_tasks.double", 1)
    batch.seal()
    with pytest.raises(
        RuntimeError, match="this fan_out batch has already opened; add its tasks inside the fan_out body"
    ):
        batch.add("tests.fanout_tasks.double", 2)
    assert batch.size == 1
