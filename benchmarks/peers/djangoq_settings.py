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
# django-q2's defaults but for the broker and save_limit: the ORM broker polls every 0.2 s (its
# default), two worker processes (cpu_count, its default; 4 was no faster). save_limit 0 keeps
# every result, as pgflow keeps its step rows: the default 250 locks and loads all 250 kept
# results on every save to prune one (~33 steps/s here), and a negative one (keep none) stops
# chains, whose next task django-q2 enqueues only when it saves the result.
Q_CLUSTER = {
    "name": "bench",
    "orm": "default",
    "workers": int(os.environ.get("BENCH_DJANGOQ_WORKERS", "2")),
    "timeout": 60,
    "retry": 120,
    "max_attempts": 1,
    "bulk": int(os.environ.get("BENCH_DJANGOQ_BULK", "1")),
    "save_limit": int(os.environ.get("BENCH_DJANGOQ_SAVE_LIMIT", "0")),
    "catch_up": False,
    "log_level": "WARNING",  # every system logs warnings only, so no one pays for INFO lines
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
