"""Settings of the example project, read from the environment with django-environ.

DATABASE_URL, SECRET_KEY, DEBUG, ALLOWED_HOSTS and PGFLOW_* come from the environment (or
a ``.env`` file beside manage.py). With no DATABASE_URL a command that needs a database
starts (or reuses) the project's private PostgreSQL cluster in ``.pgdata/`` (PGFLOW_PGDATA;
PGFLOW_POSTGRES picks the system's or the embedded server: see example_project/pgcluster.py);
mypy and manage.py's offline commands (makemigrations, check) start nothing.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, True),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]", "testserver"]),
)
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default="pgflow-example-not-secret")  # noqa: S105 - demo only
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# manage.py commands that only read the settings; mypy's Django plugin reads them too.
OFFLINE_COMMANDS = {"makemigrations", "check", "collectstatic", "help", "version", "--help", "--version"}


def _command() -> str:
    """What is running, as a user would name it in a shell."""
    if "mypy" in sys.modules:
        return "mypy"
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return " ".join([name, *sys.argv[1:2]])


def _needs_database() -> bool:
    if "mypy" in sys.modules:
        return False
    argv = sys.argv[1:]
    if Path(sys.argv[0]).name == "manage.py":
        return (bool(argv) and argv[0] not in OFFLINE_COMMANDS) or "--database" in argv
    return True


if "DATABASE_URL" in os.environ:
    DATABASES = {"default": env.db("DATABASE_URL")}
elif not _needs_database():
    # Nothing will connect, so no server is started for it.
    DATABASES = {"default": {"ENGINE": "django.db.backends.dummy"}}
else:
    from example_project import pgcluster

    try:
        cluster = pgcluster.start(env("PGFLOW_PGDATA", default=str(BASE_DIR / ".pgdata")))
    except pgcluster.ClusterError as exc:
        sys.exit(
            f"pgflow example project: {_command()} needs a database and no DATABASE_URL is set; "
            f"the private PostgreSQL did not start: {exc}"
        )
    print(f"[pgflow] PostgreSQL: {cluster.describe()}", file=sys.stderr, flush=True)
    os.environ["DATABASE_URL"] = cluster.url  # child processes (worker, qcluster, web) reuse it
    DATABASES = {"default": env.db("DATABASE_URL")}

if "postgresql" in DATABASES["default"]["ENGINE"]:
    # psycopg may prepare statements (Django turns that off by default, for transaction-mode
    # poolers; nothing pools here): pgflow's start is then a prepared statement.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", 5)

# Parallel test sessions on one cluster each name their own test database.
DATABASES["default"]["TEST"] = {"NAME": env("PGFLOW_TEST_DATABASE", default=None)}
if os.environ.get("PGFLOW_TEST_DB_NAME"):
    # A worker subprocess of the acceptance tests connects straight to the test database.
    DATABASES["default"]["NAME"] = os.environ["PGFLOW_TEST_DB_NAME"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "pgflow",
    "pgflow_dashboard",
    "example_project.shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "static"

# Django's task framework (django.tasks, or the django-tasks backport on 5.2) on pgflow:
# every @task is a durable run that pgflow_worker runs ("default" is PGFLOW["QUEUE"]).
TASKS = {
    "default": {
        "BACKEND": "pgflow.tasks.PgflowBackend",
        "QUEUES": ["default", "urgent"],
        "OPTIONS": {},
    }
}

if find_spec("django_tasks_db") is not None:
    # The dev extras' django-tasks-db: a second backend, whose tasks a fan-out can hand out
    # (tests/acceptance/test_django_tasks_fanout.py) and benchmarks/tasks.py compares with pgflow.
    INSTALLED_APPS.append("django_tasks_db")
    TASKS["db"] = {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}

PGFLOW = {
    "QUEUE": env("PGFLOW_QUEUE", default="workflows"),
    "RETENTION": timedelta(days=env.int("PGFLOW_RETENTION_DAYS", default=30)),
    "LEASE": timedelta(seconds=env.float("PGFLOW_LEASE_SECONDS", default=60)),
    "MAX_LOST_ATTEMPTS": env.int("PGFLOW_MAX_LOST_ATTEMPTS", default=3),
    "ERROR_BACKTRACE_LINES": env.int("PGFLOW_ERROR_BACKTRACE_LINES", default=50),
    "ERROR_REPORTER": env("PGFLOW_ERROR_REPORTER", default=None),
    "POLL_INTERVAL": timedelta(seconds=env.float("PGFLOW_POLL_SECONDS", default=5)),
    "NOTIFY": env.bool("PGFLOW_NOTIFY", default=True),  # False: a worker behind a transaction pooler
    "HAND_OFF": env.bool("PGFLOW_HAND_OFF", default=True),  # False: every attempt waits for a claim
    "SWEEP_INTERVAL": timedelta(seconds=env.float("PGFLOW_SWEEP_SECONDS", default=10)),
    "SHUTDOWN_GRACE": timedelta(seconds=env.float("PGFLOW_SHUTDOWN_GRACE_SECONDS", default=30)),
    "MCP_MAY_DECIDE": env.bool("PGFLOW_MCP_MAY_DECIDE", default=False),  # agents decide approvals as their user
}

if os.environ.get("PGFLOW_APPROVAL_EMAIL_BASE_URL"):
    # Mail the approvers when an approval opens (README "Approval email").
    PGFLOW["APPROVAL_EMAIL"] = {"BASE_URL": env("PGFLOW_APPROVAL_EMAIL_BASE_URL")}
if os.environ.get("EMAIL_BACKEND"):
    # e.g. django.core.mail.backends.filebased.EmailBackend with EMAIL_FILE_PATH (the acceptance tests).
    EMAIL_BACKEND = env("EMAIL_BACKEND")
    EMAIL_FILE_PATH = env("EMAIL_FILE_PATH", default=None)
    EMAIL_HOST = env("EMAIL_HOST", default="localhost")
    EMAIL_PORT = env.int("EMAIL_PORT", default=25)
    EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)  # a slow SMTP server holds a worker's slot this long

if os.environ.get("PGFLOW_READ_DATABASE_URL"):
    # A streaming replica for the dashboard's aggregates (docs/scaling.md "Reading from a replica").
    DATABASES["replica"] = env.db("PGFLOW_READ_DATABASE_URL")
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    PGFLOW["READ_DATABASE"] = "replica"

# django-q2 runs fan-out members; the ORM broker keeps them in this same PostgreSQL.
Q_CLUSTER = {
    "name": "pgflow-example",
    "orm": "default",
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": 60,
    "retry": 90,
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "poll": 0.2,
    "sync": env.bool("Q_SYNC", default=False),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"pgflow": {"handlers": ["console"], "level": env("PGFLOW_LOG_LEVEL", default="INFO")}},
}
