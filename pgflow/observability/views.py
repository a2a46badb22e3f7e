"""``/metrics``: this process's counters and the cluster's gauges, for Prometheus.

Mounted with ``path("", include("pgflow.observability.urls"))``. Only clients from
``PGFLOW["METRICS_ALLOWED_IPS"]``, or sending ``Authorization: Bearer <METRICS_TOKEN>``,
are answered; the others get 403 naming the settings. With several web processes, set
``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode) so each scrape sums
their counters.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_GET

from ..conf import pgflow_settings
from . import metrics

_collector: metrics.ClusterCollector | None = None
_lock = threading.Lock()


def _cluster() -> metrics.ClusterCollector:
    global _collector
    with _lock:
        if _collector is None:
            _collector = metrics.ClusterCollector(ttl=pgflow_settings.seconds("METRICS_CACHE"))
        _collector.ttl = pgflow_settings.seconds("METRICS_CACHE")
        return _collector


def allowed(request: HttpRequest) -> bool:
    token = pgflow_settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip(), token):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(entry, strict=False) for entry in pgflow_settings.METRICS_ALLOWED_IPS)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not metrics.available():
        return HttpResponse(
            "pgflow metrics need prometheus_client: pip install 'django-pgflow[metrics]'\n",
            status=501,
            content_type="text/plain",
        )
    if not allowed(request):
        return HttpResponseForbidden(
            "this address may not read pgflow's metrics: add it to "
            "PGFLOW['METRICS_ALLOWED_IPS'] or send 'Authorization: Bearer "
            "<PGFLOW['METRICS_TOKEN']>'\n",
            content_type="text/plain",
        )
    import prometheus_client
    from prometheus_client import multiprocess

    own = prometheus_client.REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        own = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(own)
    cluster = prometheus_client.CollectorRegistry(auto_describe=False)
    cluster.register(_cluster())
    body = prometheus_client.generate_latest(own) + prometheus_client.generate_latest(cluster)
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)
