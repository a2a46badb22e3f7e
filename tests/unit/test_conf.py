"""Settings validation and the system check that reports it (pgflow.E001)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgflow import checks, conf
from pgflow.conf import pgflow_settings


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"LEASE": timedelta(seconds=-5)}, "PGFLOW['LEASE'] must be a positive timedelta or number of seconds"),
        ({"LEASES": 3}, "unknown key 'LEASES' in PGFLOW (accepted: QUEUE, RETENTION,"),
        ({"RETENTION": timedelta(0)}, "PGFLOW['RETENTION'] must be a positive timedelta or None"),
        ({"MAX_LOST_ATTEMPTS": 0}, "PGFLOW['MAX_LOST_ATTEMPTS'] must be a positive whole number, got 0"),
        ({"ERROR_BACKTRACE_LINES": True}, "PGFLOW['ERROR_BACKTRACE_LINES'] must be a positive whole number"),
        ({"QUEUE": ""}, "PGFLOW['QUEUE'] must be 1-100 letters, digits"),
        ({"PREPARE_START": "no"}, "PGFLOW['PREPARE_START'] must be True or False, got 'no'"),
        ({"WAKE_BEFORE_FLUSH": 1}, "PGFLOW['WAKE_BEFORE_FLUSH'] must be True or False, got 1"),
        ({"LOG_WRITER": "yes"}, "PGFLOW['LOG_WRITER'] must be True or False, got 'yes'"),
        ({"DATABASE": "pgflw"}, "PGFLOW['DATABASE'] must be the alias of a database in DATABASES ('default'"),
        ({"NOTIFY": "off"}, "PGFLOW['NOTIFY'] must be True or False, got 'off'"),
        ({"ERROR_REPORTER": "no.such.module.report"}, "PGFLOW['ERROR_REPORTER'] must be None, a callable"),
        (
            {"BACKTRACE_CLEANER": "no.such.module.clean"},
            "PGFLOW['BACKTRACE_CLEANER'] must be None, a callable or "
            "the dotted path of one, got 'no.such.module.clean'",
        ),
        (
            {"BACKTRACE_CLEANER": "pgflow.conf.DEFAULTS"},
            "PGFLOW['BACKTRACE_CLEANER'] must be None, a callable or "
            "the dotted path of one, got 'pgflow.conf.DEFAULTS' (a dict, "
            "not a callable)",
        ),
        ("fast", "PGFLOW must be a dict, got str"),
    ],
)
def test_each_bad_setting_is_named_with_what_is_accepted(given, message):
    problems = conf.validate(given)
    assert len(problems) == 1
    assert problems[0].startswith(message)


def test_good_settings_have_no_problems():
    assert conf.validate({"LEASE": 30, "RETENTION": None, "QUEUE": "mail", "ERROR_REPORTER": print}) == []
    assert conf.validate({"BACKTRACE_CLEANER": "pgflow.core.errors.clean"}) == []
    assert conf.validate(None) == []


def test_the_system_check_reports_E001(settings):
    settings.PGFLOW = {"LEASE": timedelta(seconds=-1), "BOGUS": 1}
    errors = checks.check_settings()
    assert [e.id for e in errors] == ["pgflow.E001", "pgflow.E001"]
    assert "unknown key 'BOGUS'" in errors[0].msg
    assert "PGFLOW['LEASE']" in errors[1].msg


def test_settings_are_read_lazily_with_defaults(settings):
    settings.PGFLOW = {"LEASE": timedelta(seconds=9)}
    assert pgflow_settings.seconds("LEASE") == 9
    assert pgflow_settings.heartbeat_seconds == 3
    assert pgflow_settings.QUEUE == "workflows"
    settings.PGFLOW = {}
    assert pgflow_settings.seconds("LEASE") == 60
    with pytest.raises(AttributeError, match="unknown pgflow setting 'NOPE'"):
        pgflow_settings.NOPE  # noqa: B018


def test_the_checks_import_each_apps_workflows_module():
    import sys

    sys.modules.pop("example_project.shop.workflows", None)
    from pgflow import registry

    checks.check_workflows()
    assert "example_project.shop.workflows" in sys.modules
    assert "example_project.shop.workflows.OrderFulfilment" in [w.workflow_path() for w in registry.registered()]


def test_a_heartbeat_not_shorter_than_the_lease_is_refused():
    (problem,) = conf.validate({"LEASE": 10, "HEARTBEAT_INTERVAL": timedelta(seconds=10)})
    assert problem == (
        "PGFLOW['HEARTBEAT_INTERVAL'] (10s) must be shorter than PGFLOW['LEASE'] (10s), "
        "or every long step loses its lease"
    )


def test_queue_names_follow_one_rule():
    (problem,) = conf.validate({"QUEUE": "has space"})
    assert problem == "PGFLOW['QUEUE'] must be 1-100 letters, digits, '_', '.', ':' or '-', got 'has space'"


@pytest.mark.parametrize(
    ("key", "value", "example"),
    [("RETENTION", 30, "days=30"), ("RETENTION", 7.5, "days=30"), ("FAN_OUT_GRACE", 5, "minutes=5")],
)
def test_a_bare_number_for_a_duration_of_days_or_minutes_is_refused(key, value, example):
    # "RETENTION": 30 reads as 30 days and would purge every run 30 seconds after it ends.
    assert conf.validate({key: value}) == [
        f"PGFLOW[{key!r}] must be a timedelta, got the bare number {value!r}, which would mean {value!r} seconds; "
        f"write timedelta({example}) or the length you mean"
    ]


def test_durations_of_days_or_minutes_take_a_positive_timedelta():
    assert conf.validate({"RETENTION": timedelta(days=90), "FAN_OUT_GRACE": timedelta(minutes=1)}) == []
    assert conf.validate({"RETENTION": None}) == []
    assert conf.validate({"FAN_OUT_GRACE": None, "RETENTION": "30d"}) == [
        "PGFLOW['RETENTION'] must be a positive timedelta or None, got '30d'",
        "PGFLOW['FAN_OUT_GRACE'] must be a positive timedelta, got None",
    ]


def test_seconds_long_durations_still_take_a_number_of_seconds():
    assert (
        conf.validate(
            {"LEASE": 30, "POLL_INTERVAL": 0.5, "SWEEP_INTERVAL": 10, "SHUTDOWN_GRACE": 30, "HEARTBEAT_INTERVAL": 5}
        )
        == []
    )
