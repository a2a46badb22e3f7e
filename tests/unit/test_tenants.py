"""pgflow.tenants: the tenant key's rule, the context of a run, and who sees which tenants;
the three settings' validation (pgflow.E001)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from pgflow import conf, tenants
from pgflow.core.limits import key_value, tenant_key_of_run


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"TENANT": "no.such.module.current"}, "PGFLOW['TENANT'] must be None, a callable or the dotted path of one"),
        ({"TENANT_CONTEXT": 3}, "PGFLOW['TENANT_CONTEXT'] must be None, a callable or the dotted path of one, got 3"),
        ({"TENANT_VISIBLE": "pgflow.conf.DEFAULTS"}, "PGFLOW['TENANT_VISIBLE'] must be None, a callable"),
    ],
)
def test_the_tenant_settings_must_name_callables(given, message):
    problems = conf.validate(given)
    assert any(message in problem for problem in problems), problems


def test_the_tenant_settings_accept_dotted_paths_and_callables():
    assert conf.validate({"TENANT": "pgflow.contrib.tenants.current_schema", "TENANT_VISIBLE": lambda user: None}) == []


@pytest.mark.parametrize("value", [None, "acme", "a" * tenants.MAX_TENANT])
def test_a_tenant_key_is_a_short_string_or_none(value):
    assert tenants.checked(value) == value


@pytest.mark.parametrize(
    ("value", "error", "said"),
    [
        (7, TypeError, "a tenant key must be a string or None, got int 7"),
        ("", ValueError, "it is empty"),
        ("a\x00b", ValueError, "NUL"),
        ("a" * 101, ValueError, "it is 101 characters long, more than 100"),
    ],
)
def test_a_bad_tenant_key_says_what_is_accepted(value, error, said):
    with pytest.raises(error, match=said):
        tenants.checked(value)


class _Run:
    def __init__(self, tenant):
        self.tenant = tenant


class _Workflow:
    def __init__(self, tenant):
        self.run = _Run(tenant)


def test_no_tenant_or_no_setting_enters_nothing(settings):
    settings.PGFLOW = {}
    assert isinstance(tenants.context("acme"), nullcontext)
    settings.PGFLOW = {"TENANT_CONTEXT": lambda tenant: pytest.fail("asked for no tenant")}
    assert isinstance(tenants.context_of(_Workflow(None)), nullcontext)


def test_the_context_is_the_settings_for_the_runs_tenant(settings):
    settings.PGFLOW = {"TENANT_CONTEXT": lambda tenant: f"context of {tenant}"}
    assert tenants.context_of(_Workflow("acme")) == "context of acme"


def test_visible_is_none_or_a_set(settings):
    settings.PGFLOW = {}
    assert tenants.visible("anyone") is None
    settings.PGFLOW = {"TENANT_VISIBLE": lambda user: None if user == "root" else ["acme"]}
    assert tenants.visible("root") is None
    assert tenants.visible("ann") == frozenset({"acme"})
    settings.PGFLOW = {"TENANT_VISIBLE": lambda user: "acme"}
    with pytest.raises(TypeError, match="must return None \\(every tenant\\) or a set of tenant keys, got 'acme'"):
        tenants.visible("ann")


def test_the_tenant_key_of_a_limit_is_the_runs_tenant_unless_the_class_has_its_own():
    assert tenant_key_of_run(_Workflow)
    assert key_value(_Workflow("acme"), "tenant", "default") == "tenant:acme"
    assert key_value(_Workflow(None), "tenant", "default") is None

    class Own(_Workflow):
        def tenant(self):
            return "own"

    assert not tenant_key_of_run(Own)
    assert key_value(Own("acme"), "tenant", "default") == "own"
