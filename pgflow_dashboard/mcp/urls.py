"""Mount with one line in the project's ``urls.py``:
``path("mcp/", include("pgflow_dashboard.mcp.urls"))``."""

from django.core.exceptions import ImproperlyConfigured
from django.urls import path

try:
    from .http import endpoint
except ImportError as exc:  # the SDK is an extra: say which, rather than "No module named 'anyio'"
    raise ImproperlyConfigured(
        f"pgflow_dashboard.mcp.urls needs the MCP SDK: pip install 'django-pgflow[mcp]' ({exc})"
    ) from exc

app_name = "pgflow_mcp"
urlpatterns = [path("", endpoint, name="endpoint")]
