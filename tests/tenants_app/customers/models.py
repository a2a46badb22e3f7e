"""The tenants: one PostgreSQL schema each (django-tenants)."""

from django.db import models
from django_tenants.models import DomainMixin, TenantMixin


class Client(TenantMixin):
    name = models.CharField(max_length=100)
    auto_create_schema = True  # its schema and its tenant apps' tables, made on save()


class Domain(DomainMixin):
    pass
