"""Error capture: the class, message, backtrace and causes recorded on a failed attempt."""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest

import pgflow
from pgflow.core import errors

PGFLOW_DIR = os.path.dirname(os.path.abspath(pgflow.__file__))
FUTURES_DIR = os.path.dirname(os.path.abspath(concurrent.futures.__file__))
# Never written to disk: code compiled under this name has frames that look like the runner's.
RUNNER = os.path.join(PGFLOW_DIR, "runtime", "_pretend_runner.py")


def _exception(name: str, module: str = "myapp.errors", qualname: str | None = None) -> type[Exception]:
    cls = type(name, (Exception,), {"__module__": module})
    cls.__qualname__ = qualname or name
    return cls


PaymentDeclined = _exception("PaymentDeclined")


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:
        return caught


def _names(backtrace: str) -> list[str]:
    """The function of every frame printed, outermost first."""
    return [line.rsplit(", in ", 1)[1] for line in backtrace.splitlines() if line.startswith('  File "')]


# --- class and message ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "name"),
    [
        (ValueError("x"), "ValueError"),
        (KeyError("x"), "KeyError"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (PaymentDeclined("x"), "myapp.errors.PaymentDeclined"),
        (_exception("Declined", qualname="Gateway.Declined")("x"), "myapp.errors.Gateway.Declined"),
        (pgflow.StepTimeout("x"), "pgflow.exceptions.StepTimeout"),
    ],
)
def test_error_class_is_the_qualified_name(error, name):
    assert errors.capture(error, backtrace_lines=50)["error_class"] == name


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("card declined", "card declined"),
        ("", ""),
        ("x" * 10_000, "x" * 10_000),
        ("x" * 10_001, "x" * 9_999 + "…"),
        ("y" * 20_000, "y" * 9_999 + "…"),
    ],
)
def test_error_message_is_cut_at_10000_characters(message, expected):
    captured = errors.capture(PaymentDeclined(message), backtrace_lines=50)
    assert captured["error_message"] == expected


def test_a_20000_character_message_keeps_exactly_10000():
    message = "".join(chr(ord("a") + i % 26) for i in range(20_000))
    kept = errors.capture(ValueError(message), backtrace_lines=50)["error_message"]
    assert (len(kept), kept[-1], kept[:-1]) == (10_000, "…", message[:9_999])


def test_the_message_is_what_str_gives():
    assert errors.capture(KeyError("plan"), backtrace_lines=50)["error_message"] == "'plan'"


def test_an_unprintable_message_does_not_break_capture():
    Weird = _exception("Weird")
    Weird.__str__ = lambda self: 1 / 0
    assert errors.capture(Weird(), backtrace_lines=50)["error_message"] == "<unprintable myapp.errors.Weird object>"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("abc", 3, "abc"), ("abcd", 3, "ab…"), ("", 1, ""), ("ab", 1, "…"), ("a", 1, "a")],
)
def test_truncate(text, limit, expected):
    assert errors.truncate(text, limit) == expected


def test_truncate_needs_room_for_the_ellipsis():
    with pytest.raises(ValueError, match=r"^limit must be a whole number of at least 1, got 0$"):
        errors.truncate("abc", 0)


def test_cleared():
    assert errors.cleared() == {
        "error_class": None,
        "error_message": None,
        "error_backtrace": None,
        "error_causes": [],
    }


# --- causes ----------------------------------------------------------------------------


def _explicit_cause():
    try:
        raise KeyError("plan")
    except KeyError as error:
        raise PaymentDeclined("no plan") from error


def _implicit_context():
    try:
        raise KeyError("plan")
    except KeyError:
        raise PaymentDeclined("while handling")  # noqa: B904 - the implicit context is the point


def _suppressed():
    try:
        raise KeyError("plan")
    except KeyError:
        raise PaymentDeclined("clean") from None


def _cause_over_context():
    try:
        raise KeyError("context")
    except KeyError:
        raise PaymentDeclined("outer") from ConnectionError("cause")


def _suppressed_further_down():
    try:
        try:
            raise KeyError("hidden")
        except KeyError:
            raise ConnectionError("middle") from None
    except ConnectionError as error:
        raise PaymentDeclined("outer") from error


@pytest.mark.parametrize(
    ("raiser", "chain"),
    [
        (_explicit_cause, [{"class": "KeyError", "message": "'plan'"}]),
        (_implicit_context, [{"class": "KeyError", "message": "'plan'"}]),
        (_suppressed, []),
        (_cause_over_context, [{"class": "ConnectionError", "message": "cause"}]),
        (_suppressed_further_down, [{"class": "ConnectionError", "message": "middle"}]),
    ],
    ids=["raise from", "raised while handling", "raise from None", "cause over context", "suppressed below"],
)
def test_causes_follow_the_chain_python_prints(raiser, chain):
    with pytest.raises(PaymentDeclined) as raised:
        raiser()
    assert errors.capture(raised.value, backtrace_lines=50)["error_causes"] == chain


def _chain(depth: int) -> Exception:
    error = PaymentDeclined("outer")
    link = error
    for number in range(1, depth + 1):
        link.__cause__ = ValueError(f"cause {number}")
        link = link.__cause__
    return error


@pytest.mark.parametrize(
    ("depth", "kept"),
    [(0, []), (1, ["cause 1"]), (5, [f"cause {n}" for n in range(1, 6)]), (7, [f"cause {n}" for n in range(1, 6)])],
)
def test_causes_are_cut_at_5(depth, kept):
    assert [c["message"] for c in errors.causes(_chain(depth))] == kept


def test_a_cyclic_chain_stops_where_it_repeats():
    first, second, third = PaymentDeclined("first"), ConnectionError("second"), ValueError("third")
    first.__cause__, second.__cause__, third.__cause__ = second, third, second
    assert errors.causes(first) == [
        {"class": "ConnectionError", "message": "second"},
        {"class": "ValueError", "message": "third"},
    ]


def test_a_chain_back_to_the_error_itself_stops_there():
    first, second = PaymentDeclined("first"), ConnectionError("second")
    first.__cause__, second.__context__ = second, first
    assert errors.causes(first) == [{"class": "ConnectionError", "message": "second"}]


def test_equal_but_distinct_errors_are_distinct_links():
    error = PaymentDeclined("x")
    error.__cause__ = ValueError("same")
    error.__cause__.__cause__ = ValueError("same")
    assert len(errors.causes(error)) == 2


def test_a_cause_message_is_cut_at_1000_characters():
    error = PaymentDeclined("outer")
    error.__cause__ = ValueError("z" * 5_000)
    assert errors.causes(error) == [{"class": "ValueError", "message": "z" * 999 + "…"}]


# --- backtrace --------------------------------------------------------------------------


def level_1():
    level_2()


def level_2():
    level_3()


def level_3():
    level_4()


def level_4():
    level_5()


def level_5():
    raise PaymentDeclined("card declined")


def _capture_levels(lines: int) -> str:
    with pytest.raises(PaymentDeclined) as raised:
        level_1()
    return errors.capture(raised.value, backtrace_lines=lines)["error_backtrace"]


@pytest.mark.parametrize(
    ("lines", "omitted", "names"),
    [
        (50, None, ["_capture_levels", "level_1", "level_2", "level_3", "level_4", "level_5"]),
        (6, None, ["_capture_levels", "level_1", "level_2", "level_3", "level_4", "level_5"]),
        (5, "  … 1 outer frame not shown", ["level_1", "level_2", "level_3", "level_4", "level_5"]),
        (2, "  … 4 outer frames not shown", ["level_4", "level_5"]),
        (1, "  … 5 outer frames not shown", ["level_5"]),
        (0, "  … 6 outer frames not shown", []),
    ],
)
def test_backtrace_keeps_the_innermost_frames(lines, omitted, names):
    backtrace = _capture_levels(lines)
    printed = backtrace.splitlines()
    assert printed[0] == "Traceback (most recent call last):"
    assert (printed[1] if omitted else None) == omitted
    assert _names(backtrace) == names
    assert printed[-1] == "myapp.errors.PaymentDeclined: card declined"


def test_backtrace_frames_read_as_python_prints_them():
    backtrace = _capture_levels(1)
    line = level_5.__code__.co_firstlineno + 1
    assert backtrace.splitlines()[2:] == [
        f'  File "{__file__}", line {line}, in level_5',
        '    raise PaymentDeclined("card declined")',
        "myapp.errors.PaymentDeclined: card declined",
    ]


def test_an_error_never_raised_has_no_backtrace():
    assert errors.capture(PaymentDeclined("built, not raised"), backtrace_lines=50)["error_backtrace"] == ""


def test_the_backtrace_last_line_is_cut_at_1000_characters():
    backtrace = errors.capture(_raised(ValueError("q" * 20_000)), backtrace_lines=50)["error_backtrace"]
    assert backtrace.splitlines()[-1] == "ValueError: " + "q" * 987 + "…"


def _frame(filename: str, name: str = "f") -> traceback.FrameSummary:
    return traceback.FrameSummary(filename, 1, name, lookup_line=False, line="pass")


@pytest.mark.parametrize(
    ("filename", "hidden"),
    [
        (os.path.join(PGFLOW_DIR, "runtime", "runner.py"), True),
        (os.path.join(PGFLOW_DIR, "runtime", "worker.py"), True),
        (os.path.join(PGFLOW_DIR, "store.py"), True),
        (os.path.join(PGFLOW_DIR, "core", "policy.py"), True),
        (threading.__file__, True),
        (os.path.join(FUTURES_DIR, "thread.py"), True),
        (os.path.join(FUTURES_DIR, "_base.py"), True),
        # pgflow's own engine, every module of it
        (os.path.join(PGFLOW_DIR, "workflow.py"), True),
        (os.path.join(PGFLOW_DIR, "fanout", "djangoq.py"), True),
        # installed libraries and the standard library
        ("/srv/venv/lib/python3.12/site-packages/django/core/validators.py", True),
        ("/usr/lib/python3/dist-packages/requests/api.py", True),
        (json.__file__, True),
        ("<frozen importlib._bootstrap>", True),
        # The application's side, and look-alikes that are not pgflow's.
        ("/srv/shop/pgflow/runtime/runner.py", False),
        ("/srv/shop/workflows/onboarding.py", False),
        ("/srv/site-packages-notes/shop.py", False),
        ("<string>", False),
    ],
)
def test_is_hidden(filename, hidden):
    assert errors.is_hidden(filename) is hidden


def test_clean_keeps_the_user_frames_in_order():
    frames = [
        _frame(threading.__file__, "run"),
        _frame(os.path.join(PGFLOW_DIR, "runtime", "runner.py"), "run_step"),
        _frame("/srv/shop/workflows.py", "send_welcome"),
        _frame(os.path.join(PGFLOW_DIR, "store.py"), "record"),
        _frame("/srv/shop/mail.py", "deliver"),
    ]
    assert [frame.name for frame in errors.clean(frames)] == ["send_welcome", "deliver"]


def test_clean_keeps_every_frame_when_all_are_pgflow_s():
    frames = [
        _frame(os.path.join(PGFLOW_DIR, "runtime", "worker.py"), "loop"),
        _frame(os.path.join(PGFLOW_DIR, "store.py"), "record"),
    ]
    assert [frame.name for frame in errors.clean(frames)] == ["loop", "record"]


def _pretend_runner():
    namespace: dict = {}
    source = (
        "def call(body):\n"
        "    return body()\n"
        "def fail_inside():\n"
        "    try:\n"
        "        raise RuntimeError('lease lost')\n"
        "    except RuntimeError as error:\n"
        "        return error\n"
    )
    exec(compile(source, RUNNER, "exec"), namespace)  # noqa: S102 - test-only code, no input
    return namespace


def send_welcome():
    raise PaymentDeclined("card declined")


def test_runner_frames_are_removed_from_a_real_traceback():
    runner = _pretend_runner()
    with pytest.raises(PaymentDeclined) as raised:
        runner["call"](send_welcome)
    backtrace = errors.capture(raised.value, backtrace_lines=50)["error_backtrace"]
    assert _names(backtrace) == ["test_runner_frames_are_removed_from_a_real_traceback", "send_welcome"]
    assert RUNNER not in backtrace


def test_thread_pool_frames_are_removed_from_a_real_traceback():
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(send_welcome)
        with pytest.raises(PaymentDeclined) as raised:
            future.result()
    raw = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "__get_result" in raw and "run" in raw  # the plumbing is there to remove
    backtrace = errors.capture(raised.value, backtrace_lines=50)["error_backtrace"]
    assert _names(backtrace) == ["test_thread_pool_frames_are_removed_from_a_real_traceback", "send_welcome"]


def test_an_error_raised_inside_pgflow_alone_keeps_its_frames():
    error = _pretend_runner()["fail_inside"]()
    backtrace = errors.capture(error, backtrace_lines=50)["error_backtrace"]
    assert backtrace.splitlines() == [
        "Traceback (most recent call last):",
        f'  File "{RUNNER}", line 5, in fail_inside',
        "RuntimeError: lease lost",
    ]


def test_capture_gives_every_column():
    with pytest.raises(PaymentDeclined) as raised:
        _explicit_cause()
    captured = errors.capture(raised.value, backtrace_lines=50)
    assert sorted(captured) == ["error_backtrace", "error_causes", "error_class", "error_message"]
    assert (captured["error_class"], captured["error_message"], captured["error_causes"]) == (
        "myapp.errors.PaymentDeclined",
        "no plan",
        [{"class": "KeyError", "message": "'plan'"}],
    )
    assert _names(captured["error_backtrace"]) == ["test_capture_gives_every_column", "_explicit_cause"]


def _validated_email(address: str) -> None:
    from django.core.validators import validate_email

    validate_email(address)  # raises from inside Django


def test_an_error_raised_inside_django_shows_the_application_line():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        _validated_email("not an address")
    raw = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert any("site-packages" in name for name in raw)  # Django's frames are there to drop
    backtrace = errors.capture(raised.value, backtrace_lines=50)["error_backtrace"]
    assert _names(backtrace) == ["test_an_error_raised_inside_django_shows_the_application_line", "_validated_email"]
    assert "    validate_email(address)  # raises from inside Django" in backtrace.splitlines()
    assert "site-packages" not in backtrace


def test_an_error_raised_inside_a_library_alone_keeps_its_frames():
    try:
        json.loads("{")
    except ValueError as exc:
        error = exc
    error.__traceback__ = error.__traceback__.tb_next  # as if the body were not ours either
    backtrace = errors.capture(error, backtrace_lines=50)["error_backtrace"]
    assert "json" in backtrace and "decode" in backtrace


def test_a_cleaner_replaces_the_rule_and_keeping_nothing_keeps_every_frame():
    def only_last(frames):
        return frames[-1:]

    with pytest.raises(PaymentDeclined) as raised:
        _explicit_cause()
    assert _names(errors.capture(raised.value, backtrace_lines=50, cleaner=only_last)["error_backtrace"]) == [
        "_explicit_cause"
    ]
    everything = errors.capture(raised.value, backtrace_lines=50, cleaner=lambda frames: [])["error_backtrace"]
    assert _names(everything) == [
        "test_a_cleaner_replaces_the_rule_and_keeping_nothing_keeps_every_frame",
        "_explicit_cause",
    ]
    cut = errors.capture(raised.value, backtrace_lines=1, cleaner=lambda frames: frames)["error_backtrace"]
    assert _names(cut) == ["_explicit_cause"]
