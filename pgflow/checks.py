"""System checks: pgflow.E001 for settings, pgflow.E002 and pgflow.W001 for workflow definitions,
pgflow.E003 and pgflow.W002 for what a @fan_out needs from django-q2, pgflow.E004 for a
database that is not PostgreSQL, pgflow.W003 for a server whose standbys could lose
acknowledged commits in a failover."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DatabaseError, connections, router

from . import conf, db, registry
from .exceptions import DefinitionError
from .workflow import definition_problems, matcher_warnings


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [
        checks.Error(problem, hint="See the Settings section of the README.", id="pgflow.E001")
        for problem in conf.validate(getattr(settings, "PGFLOW", None))
    ]


@checks.register()
def check_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.E004 when pgflow's database is not PostgreSQL (a project left on startproject's
    SQLite): reads only the settings, so ``check`` says so and ``migrate`` (which runs the
    checks first) stops before it writes anything."""
    aliases = {db.alias(), *(databases or ())}
    return [
        checks.Error(
            f"database {alias!r} uses {connections[alias].vendor} ({settings.DATABASES[alias].get('ENGINE')}); "
            "pgflow needs PostgreSQL (its claims, locks and indexes are PostgreSQL's)",
            hint=f'Set DATABASES["{alias}"]["ENGINE"] = "django.db.backends.postgresql"; see the README\'s Install.',
            id="pgflow.E004",
        )
        for alias in sorted(aliases)
        if alias in settings.DATABASES
        and connections[alias].vendor != "postgresql"
        # Django's dummy backend connects to nothing: a settings module that has no database
        # for a command that needs none (check, makemigrations) is no SQLite mistake.
        and settings.DATABASES[alias].get("ENGINE") != "django.db.backends.dummy"
    ]


@checks.register()
def check_router(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.E005 when Django's routers send pgflow's models elsewhere than
    ``PGFLOW["DATABASE"]``: its ORM reads and writes would go to one database and its SQL to
    another."""
    from .models import WorkflowRun  # lazy: app registry; checks are imported with the app

    alias = db.alias()
    if alias not in settings.DATABASES:
        return []  # pgflow.E001 says so
    found = {router.db_for_read(WorkflowRun), router.db_for_write(WorkflowRun)}
    if found == {alias}:
        return []
    return [
        checks.Error(
            f"PGFLOW['DATABASE'] is {alias!r}, but DATABASE_ROUTERS send pgflow's models to "
            f"{' and '.join(repr(name) for name in sorted(found))}",
            hint='Put "pgflow.db.Router" first in DATABASE_ROUTERS: it sends pgflow\'s models to PGFLOW["DATABASE"] '
            "and migrates them only there (docs/reference.md, Settings).",
            id="pgflow.E005",
        )
    ]


@checks.register()
def check_workflows(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.E002 per problem in a registered workflow's definition; pgflow.W001 per name
    matcher that will never match.

    Class creation already refused what it could see; this re-validates once every app is
    loaded: methods deleted or replaced afterwards, class options reassigned, and dotted
    exception names, which may only import now.
    """
    packages = None if app_configs is None else tuple(config.name for config in app_configs)
    messages: list[checks.CheckMessage] = discover(app_configs)
    for workflow in registry.registered():
        module = workflow.__module__
        if packages is not None and not any(module == p or module.startswith(p + ".") for p in packages):
            continue
        path = workflow.workflow_path()
        for problem in definition_problems(workflow):
            messages.append(
                checks.Error(
                    f"{path}: {problem}", hint="Fix the workflow class's declaration.", obj=workflow, id="pgflow.E002"
                )
            )
        for warning in matcher_warnings(workflow):
            messages.append(
                checks.Warning(
                    f"{path}: {warning}",
                    hint="A matcher that names no class never matches.",
                    obj=workflow,
                    id="pgflow.W001",
                )
            )
    return messages


def discover(app_configs: Any = None) -> list[checks.CheckMessage]:
    """Import every installed app's ``workflows`` module, as the admin does with ``admin``,
    so the checks see workflows nothing imported yet; a module whose class declaration is
    wrong is reported as pgflow.E002 rather than crashing the check."""
    messages: list[checks.CheckMessage] = []
    for config in app_configs or apps.get_app_configs():
        name = f"{config.name}.workflows"
        try:
            import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
        except DefinitionError as exc:
            # The message names the class (module.QualName) already; name the module only if not.
            text = str(exc) if name in str(exc) else f"{name}: {exc}"
            messages.append(checks.Error(text, hint="Fix the workflow class's declaration.", id="pgflow.E002"))
    return messages


INSTALL_HINT = "pgflow hands @fan_out tasks to django-q2: add 'django_q' to INSTALLED_APPS, run migrate, "
Q_CLUSTER_HINT = (
    "set Q_CLUSTER = {'name': 'myproject', 'orm': 'default', 'timeout': 60, 'retry': 90, 'max_attempts': 1, "
    "'ack_failures': True} (the ORM broker keeps tasks in this PostgreSQL) and run `manage.py qcluster` "
    "beside the workers; see the README's install section."
)
# Q_CLUSTER keys that choose a broker, in django-q2's order, and the module each needs.
_BROKERS = (("broker_class", None), ("iron_mq", "iron_mq"), ("sqs", "boto3"), ("orm", None), ("mongo", "pymongo"))


@checks.register()
def check_fan_out(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.E003 when a registered workflow has a @fan_out that may hand django-q2 a task (not
    only child runs and django.tasks tasks) and django-q2 cannot run it; pgflow.W002 for a
    Q_CLUSTER under which a batch may never finish."""
    users = [
        f"{workflow.workflow_path()}.{definition.name}"
        for workflow in registry.registered()
        for definition in workflow.steps()
        if definition.fans_out and not _hands_no_django_q_task(getattr(workflow, definition.method, None))
    ]
    if not users:
        return []
    installed = apps.is_installed("django_q")
    hint = Q_CLUSTER_HINT[0].upper() + Q_CLUSTER_HINT[1:] if installed else INSTALL_HINT + Q_CLUSTER_HINT
    errors, warnings = fan_out_problems(
        installed=installed,
        q_cluster=getattr(settings, "Q_CLUSTER", None),
        databases=tuple(settings.DATABASES),
        importable=_importable,
    )
    where = f"@fan_out {users[0]}" + (f" (and {len(users) - 1} more)" if len(users) > 1 else "")
    return [
        *(checks.Error(f"{where}: {problem}", hint=hint, id="pgflow.E003") for problem in errors),
        *(checks.Warning(f"{where}: {problem}", id="pgflow.W002") for problem in warnings),
    ]


def fan_out_problems(
    *, installed: bool, q_cluster: object, databases: tuple[str, ...], importable: Callable[[str], bool]
) -> tuple[list[str], list[str]]:
    """(errors, warnings) of django-q2's set-up for running @fan_out tasks, from plain values."""
    if not installed:
        return ["'django_q' is not in INSTALLED_APPS, so nothing can run its tasks"], []
    if q_cluster is None:
        return ["there is no Q_CLUSTER setting, so django-q2 would use a Redis broker on localhost"], []
    if not isinstance(q_cluster, dict):
        return [f"Q_CLUSTER must be a dict, got {type(q_cluster).__name__}"], []
    key, module = next(((key, module) for key, module in _BROKERS if q_cluster.get(key)), ("redis", "redis"))
    if key == "redis" and q_cluster.get("django_redis"):
        module = "django_redis"
    if key == "broker_class":
        module = str(q_cluster["broker_class"]).rpartition(".")[0]
    if key == "orm" and q_cluster["orm"] not in databases:
        return [
            f"Q_CLUSTER['orm'] names the database {q_cluster['orm']!r}, which is not in DATABASES "
            f"({', '.join(databases)})"
        ], []
    if module and not importable(module):
        return [f"Q_CLUSTER selects the {key} broker, which needs the {module!r} module, not installed here"], []
    warnings = []
    redelivers = key != "redis"  # Redis pops a task for good; the others deliver an unacknowledged one again
    attempts = q_cluster.get("max_attempts", 0)
    if redelivers and not q_cluster.get("ack_failures") and not (isinstance(attempts, int) and attempts > 0):
        warnings.append(
            "a member task that fails is retried for ever (no 'ack_failures' and no 'max_attempts'), "
            "so its batch never finishes; set 'ack_failures': True or 'max_attempts': N in Q_CLUSTER"
        )
    timeout, retry = q_cluster.get("timeout"), q_cluster.get("retry", 60)
    if redelivers and isinstance(timeout, int | float) and isinstance(retry, int | float) and timeout >= retry:
        warnings.append(
            f"Q_CLUSTER['timeout'] ({timeout}) is not below 'retry' ({retry}): a member still running "
            f"is delivered again and runs twice; make 'retry' longer than 'timeout'"
        )
    return [], warnings


def adds_only_child_runs(source: str | None) -> bool:
    """Whether a @fan_out body's source adds child runs (``batch.add_run``), calls nothing
    named ``add`` (a task) and hands its batch to no other call: such a batch needs no
    qcluster. Unknown source may add tasks."""
    return hands_no_django_q_task(source, lambda name: False)


def hands_no_django_q_task(source: str | None, is_task: Callable[[str], bool]) -> bool:
    """Whether a @fan_out body's source hands django-q2 nothing: it adds child runs
    (``batch.add_run``) or django.tasks tasks (``batch.add(name, ...)`` or
    ``batch.add(name.using(...), ...)`` where ``is_task(name)``, ``name`` as written, dotted),
    and nothing else: no other call named ``add``, its batch handed to no other call. A body
    that adds nothing we can see, or unknown source, may add django-q2 tasks."""
    if source is None:
        return False
    try:
        body = ast.parse(textwrap.dedent(source)).body[0]
    except (SyntaxError, IndexError):
        return False
    if not isinstance(body, ast.FunctionDef | ast.AsyncFunctionDef) or len(body.args.args) < 2:
        return False
    batch = body.args.args[1].arg  # (self, batch)
    calls = [node for node in ast.walk(body) if isinstance(node, ast.Call)]
    handed_on = any(
        isinstance(value, ast.Name) and value.id == batch
        for call in calls
        for value in [*call.args, *(keyword.value for keyword in call.keywords)]
    )
    adds = [call for call in calls if isinstance(call.func, ast.Attribute) and call.func.attr in ("add", "add_run")]
    for call in adds:
        assert isinstance(call.func, ast.Attribute)
        if call.func.attr == "add_run":
            continue
        on_batch = isinstance(call.func.value, ast.Name) and call.func.value.id == batch
        first = call.args[0] if call.args else None
        if isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "using":
            first = first.func.value  # some_task.using(priority=...)
        name = _dotted(first)
        if not (on_batch and name is not None and is_task(name)):
            return False
    return bool(adds) and not handed_on


def _dotted(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _names_a_task(body: object) -> Callable[[str], bool]:
    """``is_task`` for :func:`hands_no_django_q_task`: a dotted name, read in the body's module,
    that is a django.tasks Task (of any backend: pgflow's runs as a child run, another's is
    enqueued there; neither needs django-q2)."""
    try:
        namespace = getattr(inspect.unwrap(body), "__globals__", {})  # type: ignore[arg-type]
    except ValueError:  # a __wrapped__ cycle
        namespace = {}

    def is_task(name: str) -> bool:
        head, *rest = name.split(".")
        if head not in namespace:
            return False
        value = namespace[head]
        try:
            for part in rest:
                value = getattr(value, part)
        except Exception:  # noqa: BLE001 - a name we cannot read is not a known task
            return False
        return not callable(value) and callable(getattr(value, "enqueue", None)) and hasattr(value, "module_path")

    return is_task


def _hands_no_django_q_task(body: object) -> bool:
    return hands_no_django_q_task(_source(body), _names_a_task(body))


def _source(body: object) -> str | None:
    try:
        return inspect.getsource(body)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


REPLICATION_HINT = (
    "pgflow's exactly-once transitions and kept starts and signals survive a failover only if "
    "the promoted standby has every acknowledged commit: set synchronous_standby_names (and "
    "synchronous_commit on or stronger) on the primary. See docs/reliability.md, Production topology."
)


@checks.register(checks.Tags.database)
def check_replication(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """pgflow.W003 when a database streams to standbys none of which is synchronous (or
    ``synchronous_commit`` is ``local``/``off``): a failover to one may lose acknowledged
    commits. A database check: run by ``migrate`` and ``check --database``."""
    messages: list[checks.CheckMessage] = []
    for alias in databases or ():
        database = connections[alias]
        if database.vendor != "postgresql":
            continue
        try:
            with database.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),"
                    " count(sync_state), current_setting('synchronous_standby_names'),"
                    " current_setting('synchronous_commit') FROM pg_stat_replication"
                )
                standbys, synchronous, visible, names, commit = cursor.fetchone()
        except DatabaseError:
            continue  # not reachable now: the other checks and commands say so
        if not standbys:
            continue
        # sync_state is hidden from roles without pg_read_all_stats: then the setting decides.
        unsafe = not names.strip() or (visible and not synchronous) or commit in ("local", "off")
        if unsafe:
            messages.append(
                checks.Warning(
                    f"database {alias!r} streams to {standbys} standby(s), none synchronous "
                    f"(synchronous_standby_names={names!r}, synchronous_commit={commit!r}): a failover "
                    "may lose commits pgflow acknowledged (starts, signals, step outcomes)",
                    hint=REPLICATION_HINT,
                    id="pgflow.W003",
                )
            )
    return messages
