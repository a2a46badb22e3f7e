"""The example project's settings as a web process behind a transaction-mode pooler has them
(docs/scaling.md, "Production topology"): psycopg prepares nothing (no ``prepare_threshold``),
nor does the start (``PREPARE_START`` False)."""

from example_project.settings import *  # noqa: F403

DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None  # noqa: F405
PGFLOW = {**PGFLOW, "PREPARE_START": False}  # noqa: F405
