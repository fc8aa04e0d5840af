"""A local fake of the few Stripe HTTP API endpoints billing uses, for tests (Stripe is unreachable here):
customers, payment intents (created, updated, canceled; paid with `pay_intent`), refunds (failed with
`fail_refund`) and Checkout Sessions (paid with `pay_checkout`).

It speaks Stripe's wire format (form-encoded requests, JSON objects, error bodies), keeps idempotency
keys like Stripe does (same key → the first response; the same key with other parameters → 400
`idempotency_error`), and can fail the next N requests with a 500 (a failure is not kept for the key).
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

# The webhook signing secret the tests configure (settings.STRIPE_WEBHOOK_SECRET).
SECRET = "whsec_test_secret"


@dataclass
class FakeStripe:
    url: str = ""
    requests: list[tuple[str, str, dict[str, str], str | None]] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_next: int = 0
    _replies: dict[str, tuple[tuple[str, str, dict[str, str]], tuple[int, bytes]]] = field(
        default_factory=dict
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, path: str, form: dict[str, str], key: str | None) -> tuple[int, bytes]:
        with self._lock:
            self.requests.append((method, path, form, key))
            if key is not None and key in self._replies:
                request, reply = self._replies[key]
                if request != (method, path, form):
                    return _error(
                        400,
                        "idempotency_error",
                        "Keys for idempotent requests can only be used with the same parameters they "
                        f"were first used with. Try using a key other than '{key}'.",
                    )
                return reply
            if self.fail_next:
                self.fail_next -= 1
                return _error(500, "api_error", "fake outage")
            reply = self._route(method, path, form)
            if key is not None:
                self._replies[key] = ((method, path, form), reply)
            return reply

    def refunds_of(self, intent_id: str) -> list[dict[str, Any]]:
        return [
            o for o in self.objects.values() if o["object"] == "refund" and o["payment_intent"] == intent_id
        ]

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
                "amount_received": 0,
                "status": "requires_payment_method",
                "metadata": metadata,
            }
        elif method == "POST" and path.startswith("/v1/payment_intents/"):
            intent_id, _, action = path[20:].partition("/")
            if intent_id not in self.objects:
                return _error(404, "invalid_request_error", f"No such payment_intent: '{intent_id}'")
            intent = self.objects[intent_id]
            if intent["status"] in ("succeeded", "canceled", "processing"):
                return _error(
                    400,
                    "invalid_request_error",
                    f"This PaymentIntent's status is {intent['status']}: it cannot be changed.",
                    "payment_intent_unexpected_state",
                )
            if action == "cancel":
                obj = {
                    **intent,
                    "status": "canceled",
                    "cancellation_reason": plain.get("cancellation_reason"),
                }
            elif action == "":
                amount = int(plain.get("amount", intent["amount"]))
                obj = {**intent, **plain, "amount": amount, "metadata": {**intent["metadata"], **metadata}}
            else:
                return _error(404, "invalid_request_error", "no such route")
        elif method == "POST" and path == "/v1/refunds":
            charged = self.objects.get(plain.get("payment_intent", ""))
            if charged is None or charged["status"] != "succeeded":
                return _error(
                    400, "invalid_request_error", "This PaymentIntent has no successful charge to refund."
                )
            left = charged["amount_received"] - sum(
                r["amount"]
                for r in self.refunds_of(charged["id"])
                if r["status"] not in ("failed", "canceled")
            )
            amount = int(plain.get("amount", left))
            if amount > left:
                return _error(
                    400,
                    "invalid_request_error",
                    f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                    "amount_too_large",
                )
            obj = {
                "object": "refund",
                "id": f"re_{len(self.objects) + 1}",
                "payment_intent": charged["id"],
                "amount": amount,
                "currency": charged["currency"],
                "status": "succeeded",
                "metadata": metadata,
            }
        else:
            return _error(404, "invalid_request_error", "no such route")
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
            "payment_intent": None,
            "payment_intent_data": {
                "metadata": {
                    k[30:-1]: v for k, v in plain.items() if k.startswith("payment_intent_data[metadata][")
                }
            },
        }

    def pay_intent(self, intent_id: str, event_id: str) -> dict[str, Any]:
        """The customer pays the PaymentIntent in full: Stripe would send this event."""
        amount = self.objects[intent_id]["amount"]
        return self._event(
            event_id, "payment_intent.succeeded", intent_id, status="succeeded", amount_received=amount
        )

    def fail_intent(
        self, intent_id: str, event_id: str, message: str = "Your card was declined."
    ) -> dict[str, Any]:
        """The customer's payment is declined: Stripe would send this event."""
        return self._event(
            event_id, "payment_intent.payment_failed", intent_id, last_payment_error={"message": message}
        )

    def fail_refund(
        self, refund_id: str, event_id: str, reason: str = "expired_or_canceled_card"
    ) -> dict[str, Any]:
        """The bank returns the refund: it fails, and Stripe would send this event."""
        return self._event(event_id, "refund.updated", refund_id, status="failed", failure_reason=reason)

    def pay_checkout(self, session_id: str, event_id: str) -> dict[str, Any]:
        """The customer pays on the hosted page: the session's PaymentIntent succeeds, the session
        completes, and Stripe would send this event."""
        with self._lock:
            session = self.objects[session_id]
            intent_id = f"pi_{len(self.objects) + 1}"
            self.objects[intent_id] = {
                "object": "payment_intent",
                "id": intent_id,
                "amount": session["amount_total"],
                "amount_received": session["amount_total"],
                "currency": session["currency"],
                "customer": session["customer"],
                "status": "succeeded",
                "metadata": session["payment_intent_data"]["metadata"],
            }
        return self._event(
            event_id,
            "checkout.session.completed",
            session_id,
            status="complete",
            payment_status="paid",
            payment_intent=intent_id,
        )

    def _event(self, event_id: str, event_type: str, object_id: str, **changes: Any) -> dict[str, Any]:
        """Apply `changes` to the stored object and return the event Stripe would send about it."""
        with self._lock:
            changed = {**self.objects[object_id], **changes}
            self.objects[object_id] = changed
        return {"id": event_id, "object": "event", "type": event_type, "data": {"object": changed}}


def _error(status: int, kind: str, message: str, code: str | None = None) -> tuple[int, bytes]:
    """Stripe's error body: {"error": {type, message[, code]}}."""
    error = {"type": kind, "message": message, **({"code": code} if code else {})}
    return status, json.dumps({"error": error}).encode()


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
