"""Signed job callbacks: the router signs what it POSTs to a job's callback URL with its Ed25519 key, so
the receiver checks it came from the router (its public key: ``GET /v1/jobs/callback-key``) and is
recent. Delivery is at least once: the body's ``id`` (the job) lets the receiver drop repeats."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import socket
import time
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from treemeter_records import key_id_for

CALLBACK_DOMAIN = b"treemeter-job-callback-v1\n"
SIGNATURE_HEADER = "x-treemeter-signature"
KEY_ID_HEADER = "x-treemeter-key-id"
TOLERANCE_S = 300


class CallbackRefused(ValueError):
    """A callback URL the router will not call: not http(s), or an address inside the network."""


def check_callback_url(url: str, *, allow_private: bool, resolve: bool) -> None:
    """Refuse a callback that is not http(s) or reaches a private, loopback or link-local address
    (the router's and workers' own network), unless ``allow_private``. With ``resolve`` the host name
    is looked up too (at delivery); without, only an address written in the URL is checked (at
    acceptance, which makes no external call)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallbackRefused("the callback URL must be an http(s) URL with a host")
    if allow_private:
        return
    host = parts.hostname
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if host == "localhost" or host.endswith(".localhost"):
            raise CallbackRefused(f"the callback host {host} is this machine") from None
        if not resolve:
            return
        try:
            found = socket.getaddrinfo(host, parts.port or 443, proto=socket.IPPROTO_TCP)
        except OSError as error:
            raise CallbackRefused(f"the callback host {host} does not resolve: {error}") from None
        addresses = [ipaddress.ip_address(info[4][0]) for info in found]
    for address in addresses:
        if not address.is_global:
            raise CallbackRefused(f"the callback address {address} is not a public address")


def sign_callback(key: Ed25519PrivateKey, body: bytes, now_s: int | None = None) -> dict[str, str]:
    """The headers of one delivery: ``t=<unix s>,ed25519=<base64 signature over domain, t and body>``."""
    stamp = int(time.time()) if now_s is None else now_s
    signature = key.sign(CALLBACK_DOMAIN + str(stamp).encode() + b"\n" + body)
    return {
        "content-type": "application/json",
        SIGNATURE_HEADER: f"t={stamp},ed25519={base64.b64encode(signature).decode()}",
        KEY_ID_HEADER: key_id_for(key),
    }


def verify_callback(public_key: Ed25519PublicKey, header: str, body: bytes, now_s: int | None = None) -> bool:
    """Whether ``header`` signs ``body`` under ``public_key`` within ``TOLERANCE_S`` of now."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        stamp = int(fields["t"])
        signature = base64.b64decode(fields["ed25519"], validate=True)
    except (KeyError, ValueError, binascii.Error):
        return False
    now = int(time.time()) if now_s is None else now_s
    if abs(now - stamp) > TOLERANCE_S:
        return False
    try:
        public_key.verify(signature, CALLBACK_DOMAIN + str(stamp).encode() + b"\n" + body)
    except InvalidSignature:
        return False
    return True
