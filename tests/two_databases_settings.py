"""The example project with pgflow's tables in a database of their own (``PGFLOW["DATABASE"]``):
the test database is pgflow's, ``PGFLOW_PROJECT_DB_NAME`` the project's (tests/acceptance/
test_two_databases.py). ``PGFLOW_NO_ROUTER`` leaves pgflow.db.Router out, as a mistake would."""

import os

from example_project.settings import *  # noqa: F403
from example_project.settings import DATABASES, PGFLOW

DATABASES["pgflow"] = {**DATABASES["default"], "NAME": os.environ["PGFLOW_TEST_DB_NAME"], "TEST": {}}
DATABASES["default"] = {**DATABASES["default"], "NAME": os.environ["PGFLOW_PROJECT_DB_NAME"]}
PGFLOW = {**PGFLOW, "DATABASE": "pgflow"}
DATABASE_ROUTERS = [] if os.environ.get("PGFLOW_NO_ROUTER") else ["pgflow.db.Router"]
