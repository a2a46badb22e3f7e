from django.apps import AppConfig


class PgflowDashboardConfig(AppConfig):
    name = "pgflow_dashboard"
    verbose_name = "pgflow dashboard"
