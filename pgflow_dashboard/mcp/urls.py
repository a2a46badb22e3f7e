"""Mount with one line in the project's ``urls.py``:
``path("mcp/", include("pgflow_dashboard.mcp.urls"))``.

Cheap to import: every process that loads the URLconf imports this module (a worker does,
through Django's URL checks), but only a web process serving ``/mcp/`` needs the SDK and
its web stack (pydantic, starlette: heavy to import and to hold), so the view imports them
on its first request.
"""

from importlib.util import find_spec

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

if find_spec("mcp") is None:  # the SDK is an extra: say which, rather than "No module named 'mcp'" on a request
    raise ImproperlyConfigured(
        "pgflow_dashboard.mcp.urls needs the MCP SDK: pip install 'django-pgflow[mcp]' (No module named 'mcp')"
    )


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    from .http import endpoint as serve  # lazy: import cost; the SDK loads on the first request only

    return serve(request)


app_name = "pgflow_mcp"
urlpatterns = [path("", endpoint, name="endpoint")]
