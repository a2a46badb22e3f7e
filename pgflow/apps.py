from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate

from . import db


class PgflowConfig(AppConfig):
    name = "pgflow"
    verbose_name = "pgflow"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registering the checks and the post-migrate schedule sync is all ready() does:
        # no connections, no settings frozen at start-up.
        from . import checks  # noqa: F401  # lazy: app registry; checks register in ready(), as Django advises

        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="pgflow.schedules.sync")
        # Fan-out members that are tasks of another django.tasks backend count when its worker
        # (a process where pgflow is installed) sends task_finished.
        from .fanout import djangotasks  # lazy: app registry; it imports the models

        djangotasks.connect()
        # An approval's first park mails its approvers: the store runs the hook on the commit.
        from . import approval_mail  # lazy: app registry; it imports the models and the store

        approval_mail.connect()


def _sync_schedules(*, using: str = "default", **_: object) -> None:
    """After ``migrate``: the declared schedules into the table (the workers sync too)."""
    from .models import Schedule  # lazy: app registry; this module is imported before the models

    # Not on another database than pgflow's, nor after migrating back to before the schedules existed.
    if using != db.alias() or Schedule._meta.db_table not in connections[using].introspection.table_names():
        return
    # Nor short of pgflow's latest migration (`migrate pgflow 0014`): the model's columns are
    # the latest's, and a column added since would be missing from the table.
    from django.db.migrations.executor import MigrationExecutor  # lazy: only migrate needs it

    executor = MigrationExecutor(connections[using])
    latest = [node for node in executor.loader.graph.leaf_nodes() if node[0] == "pgflow"]
    if executor.migration_plan(latest):
        return
    from .schedules import sync  # lazy: app registry; it imports the models

    sync()
