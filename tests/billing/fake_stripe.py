"""A local fake of the few Stripe HTTP API endpoints billing uses, for tests (Stripe is unreachable here):
customers, payment intents and Checkout Sessions (paid with `pay_checkout`).

It speaks Stripe's wire format (form-encoded requests, JSON objects, error bodies), keeps idempotency
keys like Stripe does (same key → the first response), and can fail the next N requests with a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl


@dataclass
class FakeStripe:
    url: str = ""
    requests: list[tuple[str, str, dict[str, str], str | None]] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_next: int = 0
    _replies: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, path: str, form: dict[str, str], key: str | None) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append((method, path, form, key))
            if key is not None and key in self._replies:
                return self._replies[key]
            if self.fail_next:
                self.fail_next -= 1
                return 500, json.dumps({"error": {"type": "api_error", "message": "fake outage"}}).encode()
            reply = self._route(method, path, form)
            if key is not None:
                self._replies[key] = reply
            return reply

    def _route(self, method: str, path: str, form: dict[str, str]) -> tuple[int, bytes]:
        metadata = {k[9:-1]: v for k, v in form.items() if k.startswith("metadata[")}
        plain = {k: v for k, v in form.items() if not k.startswith("metadata[")}
        obj: dict[str, Any]
        if method == "POST" and path == "/v1/customers":
            obj = {"object": "customer", "id": f"cus_{len(self.objects) + 1}", **plain, "metadata": metadata}
        elif method == "POST" and path.startswith("/v1/customers/") and path[14:] in self.objects:
            obj = {**self.objects[path[14:]], **plain, "metadata": metadata}
        elif method == "POST" and path == "/v1/checkout/sessions":
            obj = self._checkout_session(plain, metadata)
        elif method == "POST" and path == "/v1/payment_intents":
            obj = {
                "object": "payment_intent",
                "id": f"pi_{len(self.objects) + 1}",
                **plain,
                "amount": int(plain["amount"]),
                "status": "requires_payment_method",
                "metadata": metadata,
            }
        else:
            return 404, json.dumps(
                {"error": {"type": "invalid_request_error", "message": "no such route"}}
            ).encode()
        self.objects[obj["id"]] = obj
        return 200, json.dumps(obj).encode()

    def _checkout_session(self, plain: dict[str, str], metadata: dict[str, str]) -> dict[str, Any]:
        """A Checkout Session in mode=payment over `line_items[i][price_data]` (form-encoded)."""
        items = sorted({k.split("]")[0][11:] for k in plain if k.startswith("line_items[")})
        total = sum(
            int(plain[f"line_items[{i}][price_data][unit_amount]"]) * int(plain[f"line_items[{i}][quantity]"])
            for i in items
        )
        number = len(self.objects) + 1
        return {
            "object": "checkout.session",
            "id": f"cs_{number}",
            "url": f"{self.url}/pay/cs_{number}",
            "mode": plain["mode"],
            "customer": plain.get("customer"),
            "client_reference_id": plain.get("client_reference_id"),
            "currency": plain[f"line_items[{items[0]}][price_data][currency]"],
            "amount_total": total,
            "status": "open",
            "payment_status": "unpaid",
            "success_url": plain["success_url"],
            "metadata": metadata,
        }

    def pay_checkout(self, session_id: str, event_id: str) -> dict[str, Any]:
        """The customer pays on the hosted page: the session completes, and Stripe would send this event."""
        with self._lock:
            session = {**self.objects[session_id], "status": "complete", "payment_status": "paid"}
            self.objects[session_id] = session
        return {
            "id": event_id,
            "object": "event",
            "type": "checkout.session.completed",
            "data": {"object": session},
        }


@contextmanager
def fake_stripe() -> Iterator[FakeStripe]:
    fake = FakeStripe()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(parse_qsl(self.rfile.read(length).decode()))
            status, body = fake.handle("POST", self.path, form, self.headers.get("Idempotency-Key"))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def signed(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    """A Stripe-Signature header exactly as Stripe computes it (HMAC-SHA256 over "t.payload")."""
    t = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{t}.".encode() + payload, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"
