"""Who may read ``/metrics`` behind a reverse proxy (issue 33, finding 11): a proxied request
is judged by the client the proxy names, and only when the proxy is trusted."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import Client

from pgflow.checks import check_settings
from pgflow.conf import validate

pytestmark = pytest.mark.django_db

pytest.importorskip("prometheus_client")


def scrape(remote: str = "127.0.0.1", **headers: str):
    return Client(REMOTE_ADDR=remote).get("/metrics", **headers)


def test_a_request_through_an_untrusted_proxy_on_the_same_host_is_not_local():
    assert scrape().status_code == 200  # no proxy: the connection's own address
    for header in (
        {"HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"HTTP_FORWARDED": "for=203.0.113.9;proto=https"},
        {"HTTP_X_REAL_IP": "203.0.113.9"},
        {"HTTP_X_FORWARDED_FOR": "127.0.0.1"},  # even one naming a local client: the proxy is not trusted
    ):
        refused = scrape(**header)
        assert refused.status_code == 403, header
        assert b"came through a proxy" in refused.content and b"METRICS_TRUSTED_PROXIES" in refused.content


def test_a_trusted_proxy_is_believed_for_the_client_it_names(settings):
    settings.PGFLOW = {
        **settings.PGFLOW,
        "METRICS_TRUSTED_PROXIES": ["127.0.0.1"],
        "METRICS_ALLOWED_IPS": ["10.0.0.0/8"],
        "METRICS_TOKEN": "scrape-token-0123456789",
    }
    assert scrape(HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 200
    assert scrape(HTTP_FORWARDED='for="10.1.2.3:4711"').status_code == 200
    assert scrape(HTTP_X_REAL_IP="10.1.2.3").status_code == 200
    outside = scrape(HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert outside.status_code == 403 and b"203.0.113.9 may not read" in outside.content
    # A client that sends its own X-Forwarded-For: the proxy appends the real address, which counts.
    assert scrape(HTTP_X_FORWARDED_FOR="10.9.9.9, 203.0.113.9").status_code == 403
    assert scrape(HTTP_FORWARDED='for="[2001:db8::1]:4711"').status_code == 403
    assert scrape(HTTP_X_FORWARDED_FOR="unknown").status_code == 403
    # The same headers from a proxy not in the list: refused, whatever they say.
    assert scrape("192.0.2.7", HTTP_X_FORWARDED_FOR="10.1.2.3").status_code == 403
    assert (
        scrape("192.0.2.7", HTTP_X_FORWARDED_FOR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-token-0123456789")
    ).status_code == 200


def test_the_setting_is_checked_naming_what_is_accepted(settings):
    assert validate({"METRICS_TRUSTED_PROXIES": "127.0.0.1"}) == [
        "PGFLOW['METRICS_TRUSTED_PROXIES'] must be a list of addresses or networks, e.g. "
        "['127.0.0.1', '10.0.0.0/8'], got '127.0.0.1'"
    ]
    assert validate({"METRICS_TRUSTED_PROXIES": ["10.0.0.0/8", "proxy.local", 5]}) == [
        "PGFLOW['METRICS_TRUSTED_PROXIES'] holds 'proxy.local', which is not an address or network "
        "(e.g. '127.0.0.1', '10.0.0.0/8')",
        "PGFLOW['METRICS_TRUSTED_PROXIES'] holds 5, which is not an address or network "
        "(e.g. '127.0.0.1', '10.0.0.0/8')",
    ]
    settings.PGFLOW = {**settings.PGFLOW, "METRICS_TRUSTED_PROXIES": ["nginx"]}
    (error,) = check_settings()
    assert isinstance(error, checks.Error) and error.id == "pgflow.E001" and "'nginx'" in error.msg
