"""A django-tenants project (a schema per tenant) on pgflow, for
tests/acceptance/test_django_tenants.py: its database is ``PGFLOW_TENANTS_DB_NAME``, pgflow's
tables are shared (public schema), ``tests.tenants_app.notes`` is each tenant's."""

import os

import pgflow.contrib.tenants
from example_project.settings import *  # noqa: F403
from example_project.settings import DATABASES, PGFLOW

DATABASES["default"] = {
    **DATABASES["default"],
    "ENGINE": "django_tenants.postgresql_backend",
    "NAME": os.environ["PGFLOW_TENANTS_DB_NAME"],
    "TEST": {},
}
DATABASE_ROUTERS = ["django_tenants.routers.TenantSyncRouter"]

SHARED_APPS = [
    "django_tenants",
    "tests.tenants_app.customers",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "pgflow",
    "pgflow_dashboard",
]
TENANT_APPS = ["django.contrib.contenttypes", "tests.tenants_app.notes"]
INSTALLED_APPS = SHARED_APPS + [app for app in TENANT_APPS if app not in SHARED_APPS]
TENANT_MODEL = "customers.Client"
TENANT_DOMAIN_MODEL = "customers.Domain"
TASKS = {"default": {"BACKEND": "pgflow.tasks.PgflowBackend", "QUEUES": ["default"], "OPTIONS": {}}}

PGFLOW = {
    **PGFLOW,
    "TENANT": pgflow.contrib.tenants.TENANT,
    "TENANT_CONTEXT": pgflow.contrib.tenants.TENANT_CONTEXT,
}
