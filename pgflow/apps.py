from django.apps import AppConfig


class PgflowConfig(AppConfig):
    name = "pgflow"
    verbose_name = "pgflow"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registering the checks is the only thing ready() does: no signal handlers,
        # no connections, no settings frozen at start-up.
        from . import checks  # noqa: F401
