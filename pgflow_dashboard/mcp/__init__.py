"""An MCP server inside the Django project (the ``django-pgflow[mcp]`` extra).

Operators' agents read runs, insights and live workers, and steer runs, as one of the
project's users with that user's permissions; every change goes through the same public
API as user code and the admin and lands in the run's audit trail as
``agent:<client name> for user:<username>``. The protocol is the official ``mcp`` SDK's:

- :mod:`.server` builds the ``MCPServer`` and its tools for one user;
- :mod:`.http` serves it as streamable HTTP from a Django view (bearer tokens, :mod:`.tokens`);
- ``manage.py pgflow_mcp --user NAME`` serves it over stdio.

:mod:`.redact` and :mod:`.explain` are pure; :mod:`.reads` and :mod:`.actions` do the work.
"""
