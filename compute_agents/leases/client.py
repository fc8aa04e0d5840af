"""The platform's lease endpoints, called signed by the agent: grant a block, report (settle) a lease."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import protocol


class LeaseUnavailable(RuntimeError):
    """The platform could not be asked for a lease (unreachable, or an unexpected answer)."""


class LeaseRefused(RuntimeError):
    """The platform has fewer tokens left for this key and month than the request needs."""

    def __init__(self, remaining: int) -> None:
        super().__init__(f"{remaining} tokens remain")
        self.remaining = remaining


class LeaseGone(RuntimeError):
    """The platform no longer takes reports for this lease (settled already, or unknown)."""


@dataclass(frozen=True)
class LeaseAnswer:
    lease: str
    granted: int
    state: str
    expires_in_s: float


class LeaseClient:
    """Signed calls to the platform's lease endpoints."""

    def __init__(
        self,
        platform_url: str,
        agent_id: str,
        agent_key: Ed25519PrivateKey,
        *,
        http: httpx.Client | None = None,
        attempts: int = 2,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.agent_id = agent_id
        self.agent_key = agent_key
        self.http = http or httpx.Client(timeout=5.0)
        self.attempts = attempts

    def _post(self, path: str, payload: dict[str, Any]) -> httpx.Response:
        """POST, retried on transport errors with the same body (grants and reports are idempotent)."""
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        for attempt in range(1, self.attempts + 1):
            headers = protocol.signed_headers(self.agent_key, self.agent_id, "POST", path, body)
            headers["Content-Type"] = "application/json"
            try:
                return self.http.post(self.platform_url + path, content=body, headers=headers)
            except httpx.HTTPError as error:
                if attempt == self.attempts:
                    raise LeaseUnavailable(f"platform unreachable: {error}") from None
        raise AssertionError("unreachable")

    @staticmethod
    def _body(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise LeaseUnavailable(f"the platform answered {response.status_code} without a JSON object")
        return body

    def _answer(self, response: httpx.Response) -> LeaseAnswer:
        body = self._body(response)
        try:
            lease, granted, state = str(body["lease"]), int(body["granted_tokens"]), str(body["state"])
            return LeaseAnswer(lease, granted, state, float(body["expires_in_s"]))
        except (KeyError, TypeError, ValueError):
            raise LeaseUnavailable(f"an unexpected lease answer: {str(body)[:200]}") from None

    def grant(self, key_hash: str, period: str, tokens: int, min_tokens: int, request_id: str) -> LeaseAnswer:
        response = self._post(
            protocol.LEASES_PATH,
            {
                "key_hash": key_hash,
                "period": period,
                "tokens": tokens,
                "min_tokens": min_tokens,
                "request_id": request_id,
            },
        )
        if response.status_code == 429:
            details = self._body(response).get("details")
            raise LeaseRefused(int(details.get("remaining_tokens", 0)) if isinstance(details, dict) else 0)
        if response.status_code not in (200, 201):
            raise LeaseUnavailable(f"lease grant answered {response.status_code}: {response.text[:200]}")
        return self._answer(response)

    def settle(self, lease: str, seq: int, spent: int, final: bool) -> LeaseAnswer:
        response = self._post(
            protocol.lease_settle_path(lease), {"seq": seq, "spent_tokens": spent, "final": final}
        )
        if response.status_code == 404 or (
            response.status_code == 409 and self._body(response).get("code") == "lease_settled"
        ):
            raise LeaseGone(f"lease report answered {response.status_code}: {response.text[:200]}")
        if response.status_code != 200:
            raise LeaseUnavailable(f"lease report answered {response.status_code}: {response.text[:200]}")
        return self._answer(response)
