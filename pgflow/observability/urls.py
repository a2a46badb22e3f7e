"""``path("", include("pgflow.observability.urls"))`` serves ``/metrics``."""

from django.urls import path

from .views import metrics_view

app_name = "pgflow_observability"
urlpatterns = [path("metrics", metrics_view, name="metrics")]
