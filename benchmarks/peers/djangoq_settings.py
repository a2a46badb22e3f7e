"""The smallest Django project django-q2 runs in: its app, the ORM broker on BENCH_DB_URL."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ.get("BENCH_DB_URL", "postgres://postgres@127.0.0.1:5432/bench_djangoq"))

SECRET_KEY = "benchmark-only"  # noqa: S105 - never served
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_q"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or 5432),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# django-q2's defaults but for the broker: the ORM broker polls every 0.2 s (its default),
# two worker processes (cpu_count, its default), results kept (save_limit 250, its default).
Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": int(os.environ.get("BENCH_DJANGOQ_WORKERS", "2")),
    "timeout": 60,
    "retry": 120,
    "max_attempts": 1,
    "catch_up": False,
    "log_level": "WARNING",  # every system logs warnings only, so no one pays for INFO lines
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
