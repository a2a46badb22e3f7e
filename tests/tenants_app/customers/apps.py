from django.apps import AppConfig


class CustomersConfig(AppConfig):
    name = "tests.tenants_app.customers"
    label = "customers"
