"""A django-tenants project in small, for tests/acceptance/test_django_tenants.py: ``customers``
(the tenant and domain models, in the public schema) and ``notes`` (a model in each tenant's
schema), run by tests/tenants_settings.py."""
