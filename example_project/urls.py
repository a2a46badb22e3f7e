from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("mcp/", include("pgflow_dashboard.mcp.urls")),
    path("", include("pgflow.observability.urls")),  # /metrics
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
