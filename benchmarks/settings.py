"""The benchmark workers' settings: the example project's, with the benchmarks as an app.

A project's worker imports each installed app's ``workflows`` module when it starts (as the
admin finds ``admin.py``), and the peers' workers load their task modules at start too; as an
app, the benchmarks' workflows (benchmarks/workflows.py) are imported at start the same way,
instead of on the first claim of each class, inside the first latency sample.
"""

from example_project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks"]  # noqa: F405
