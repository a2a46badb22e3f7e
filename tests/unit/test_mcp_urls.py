"""Mounting the MCP endpoint: cheap to import, and a clear error without the SDK (fresh interpreters)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IMPORT_URLS = """
import sys
from django.conf import settings
settings.configure()
{prelude}
try:
    import pgflow_dashboard.mcp.urls
except Exception as exc:
    print(type(exc).__name__, exc)
print(sorted(name for name in ("mcp", "pydantic", "starlette", "uvicorn") if name in sys.modules))
"""


def _import_urls(prelude: str = "") -> list[str]:
    code = IMPORT_URLS.format(prelude=prelude)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def test_mounting_the_endpoint_does_not_import_the_sdk():
    # Every process that loads the URLconf (a worker, through Django's checks) imports the
    # module; only a request to /mcp/ needs the SDK.
    assert _import_urls() == ["[]"]


def test_without_the_sdk_mounting_it_names_the_extra_to_install():
    lines = _import_urls("sys.modules['mcp'] = None  # as if the [mcp] extra were not installed")
    assert lines[0] == (
        "ImproperlyConfigured pgflow_dashboard.mcp.urls needs the MCP SDK: "
        "pip install 'django-pgflow[mcp]' (No module named 'mcp')"
    )
