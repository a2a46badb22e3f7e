"""``/metrics``: this process's counters and the cluster's gauges, for Prometheus.

Mounted with ``path("", include("pgflow.observability.urls"))``. Only clients from
``PGFLOW["METRICS_ALLOWED_IPS"]``, or sending ``Authorization: Bearer <METRICS_TOKEN>``,
are answered; the others get 403 naming the settings.

Behind a reverse proxy every request comes from the proxy's address (127.0.0.1 for one on
the same host), so a request carrying ``X-Forwarded-For``, ``Forwarded`` or ``X-Real-IP``
is judged by the client the proxy names, and only when its ``REMOTE_ADDR`` is in
``PGFLOW["METRICS_TRUSTED_PROXIES"]`` (empty by default: a proxied request is then let in
by the token only). A client cannot make itself local with such a header: from an untrusted
address it only refuses itself. With several web processes, set
``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode) so each scrape sums
their counters.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
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


PROXY_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")
_FORWARDED_FOR = re.compile(r'for="?\[?([^\]";,]+)', re.IGNORECASE)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def allowed(request: HttpRequest) -> bool:
    return refusal(request) is None


def refusal(request: HttpRequest) -> str | None:
    """None when ``request`` may read the metrics, else why not (for the 403's text)."""
    token = pgflow_settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip(), token):
        return None
    address = client_address(request)
    if isinstance(address, str):
        return address
    if _within(address, pgflow_settings.METRICS_ALLOWED_IPS):
        return None
    return f"{address} may not read pgflow's metrics: add it to PGFLOW['METRICS_ALLOWED_IPS']"


def client_address(request: HttpRequest) -> Address | str:
    """The address of the client, or why it cannot be told. Without proxy headers, the
    connection's own; with them, the nearest address in them that is not a trusted proxy,
    if the connection comes from a trusted proxy."""
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return f"the connection's address {request.META.get('REMOTE_ADDR')!r} is not an IP address"
    sent = [name for name in PROXY_HEADERS if request.headers.get(name)]
    if not sent:
        return peer
    trusted = pgflow_settings.METRICS_TRUSTED_PROXIES
    if not _within(peer, trusted):
        return (
            f"this request came through a proxy ({', '.join(sent)} from {peer}) and {peer} is not in "
            f"PGFLOW['METRICS_TRUSTED_PROXIES']"
        )
    chain = _forwarded_chain(request)
    # The proxies append: walk from the nearest hop back past every trusted one.
    for hop in reversed(chain):
        try:
            address = ipaddress.ip_address(_without_port(hop))
        except ValueError:
            return f"the proxy named the client {hop!r}, which is not an IP address"
        if not _within(address, trusted):
            return address
    return "the proxy headers name no client outside PGFLOW['METRICS_TRUSTED_PROXIES']"


def _forwarded_chain(request: HttpRequest) -> list[str]:
    """Client addresses the proxy headers name, farthest first (X-Forwarded-For, then
    Forwarded, then X-Real-IP: the first one sent)."""
    xff = request.headers.get("X-Forwarded-For")
    if xff:
        return [hop.strip() for hop in xff.split(",") if hop.strip()]
    forwarded = request.headers.get("Forwarded")
    if forwarded:
        return [match.strip() for match in _FORWARDED_FOR.findall(forwarded)] or [forwarded]
    return [request.headers.get("X-Real-IP", "").strip()]


def _without_port(hop: str) -> str:
    """``192.0.2.1:8080`` -> ``192.0.2.1`` (Forwarded may give an IPv4 address a port)."""
    host, colon, port = hop.rpartition(":")
    return host if colon and "." in host and ":" not in host and port.isdigit() else hop


def _within(address: Address, entries: list[str] | tuple[str, ...]) -> bool:
    return any(address in ipaddress.ip_network(entry, strict=False) for entry in entries)


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not metrics.available():
        return HttpResponse(
            "pgflow metrics need prometheus_client: pip install 'django-pgflow[metrics]'\n",
            status=501,
            content_type="text/plain",
        )
    why = refusal(request)
    if why is not None:
        return HttpResponseForbidden(
            f"{why}; or send 'Authorization: Bearer <PGFLOW['METRICS_TOKEN']>'\n", content_type="text/plain"
        )
    # lazy: optional extra django-pgflow[metrics]
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
