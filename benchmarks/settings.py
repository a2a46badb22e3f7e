"""The benchmark workers' settings: the example project's, with the benchmarks as an app.

A project's worker imports each installed app's ``workflows`` module when it starts (as the
admin finds ``admin.py``), and the peers' workers load their task modules at start too; as an
app, the benchmarks' workflows (benchmarks/workflows.py) are imported at start the same way,
instead of on the first claim of each class, inside the first latency sample. The drivers
that start runs (benchmarks/peers/pgflow_peer.py) use these settings too.
"""

import os

from example_project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks"]  # noqa: F405

# Django's default database OPTIONS, as a new project's (the example project sets a
# prepare_threshold); BENCH_PREPARE_THRESHOLD=N measures with psycopg preparing after N runs.
_options = DATABASES["default"].setdefault("OPTIONS", {})  # noqa: F405
_options.pop("prepare_threshold", None)
if os.environ.get("BENCH_PREPARE_THRESHOLD"):
    _options["prepare_threshold"] = int(os.environ["BENCH_PREPARE_THRESHOLD"])
if os.environ.get("BENCH_PREPARE_START") == "0":
    PGFLOW = {**PGFLOW, "PREPARE_START": False}  # noqa: F405 - an A/B of the prepared start
if os.environ.get("BENCH_WAKE_BEFORE_FLUSH") == "0":
    PGFLOW = {**PGFLOW, "WAKE_BEFORE_FLUSH": False}  # noqa: F405 - an A/B of the early wake
if os.environ.get("BENCH_HAND_OFF") == "0":
    PGFLOW = {**PGFLOW, "HAND_OFF": False}  # noqa: F405 - an A/B of idle workers' offers

# benchmarks/realistic.py: its steps' log lines are written, as a project's would be.
LOGGING = {
    **LOGGING,  # noqa: F405
    "loggers": {**LOGGING["loggers"], "benchmarks.realistic": {"handlers": ["console"], "level": "INFO"}},  # noqa: F405
}
