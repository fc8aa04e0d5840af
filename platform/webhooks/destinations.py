"""Where a webhook may be sent: public addresses only, unless WEBHOOK_ALLOW_PRIVATE_URLS is on.

A tenant chooses its endpoint's URL, so without this check the platform would POST on the tenant's
behalf to loopback, private networks or the cloud metadata address (server-side request forgery).
The URL is checked when an endpoint is saved and again at every delivery, where the connection is
pinned to the address that was checked (Host header and TLS SNI keep the name), so a DNS answer that
changes between the check and the connection (DNS rebinding) cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings

from common.errors import ApiError


class UnsafeDestination(ApiError):
    http_status = 400


class UnresolvableHost(UnsafeDestination):
    """The name does not resolve (now): refused at delivery (and retried), accepted when saved."""


@dataclass(frozen=True)
class Destination:
    url: str  # the URL to connect to: the host replaced by the checked address
    host: str  # the original host name, for TLS SNI and certificate checks
    host_header: str  # the original host[:port], for the Host header


def resolve_destination(url: str) -> Destination:
    """The checked address to send to; UnsafeDestination for a bad scheme or a non-public address."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeDestination("unsafe_webhook_url", "A webhook URL is http(s)://host/…", {"url": url})
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80))
    except (socket.gaierror, UnicodeError):
        raise UnresolvableHost(
            "unsafe_webhook_url", f"The host {host!r} does not resolve.", {"url": url}
        ) from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not settings.WEBHOOK_ALLOW_PRIVATE_URLS and not all(a.is_global for a in addresses):
        raise UnsafeDestination(
            "unsafe_webhook_url",
            f"The host {host!r} resolves to a non-public address; webhooks go to public addresses only.",
            {"url": url, "addresses": sorted({str(a) for a in addresses})},
        )
    address = addresses[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    host_header = host if parts.port is None else f"{host}:{parts.port}"
    return Destination(url=urlunsplit(parts._replace(netloc=netloc)), host=host, host_header=host_header)


def check_endpoint_url(url: str) -> None:
    """When an endpoint is saved: refuse what resolves to a non-public address; a name that does not
    resolve yet is accepted (its DNS may come later) and checked again at every delivery."""
    try:
        resolve_destination(url)
    except UnresolvableHost:
        return
