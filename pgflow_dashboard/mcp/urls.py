"""Mount with one line in the project's ``urls.py``:
``path("mcp/", include("pgflow_dashboard.mcp.urls"))``."""

from django.urls import path

from .http import endpoint

app_name = "pgflow_mcp"
urlpatterns = [path("", endpoint, name="endpoint")]
