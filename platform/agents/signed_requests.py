"""An agent's signed request to the platform (treemeter_records.protocol): which agent key signed it.

The agent signs ``METHOD PATH\\nTIMESTAMP_NS`` (and the body's SHA-256 unless it is a GET) with its
Ed25519 key; the signature is the authentication, so no session, token or CSRF applies. Used by the quota
lease endpoints (entitlements), the routers' scheduler events (scheduling) and the manifest refusals.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter

from common.errors import error_response
from treemeter_records import protocol, public_key_from_b64

from .models import AgentKey
from .selectors import key_with_agent

REQUEST_WINDOW_NS = 300 * 10**9
# The signed request's headers, as the OpenAPI schema of every agent-signed view names them.
SIGNATURE_HEADERS = [
    OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.HEADER, required=True, description=text)
    for name, text in (
        (protocol.HEADER_AGENT, "The agent's id."),
        (protocol.HEADER_KEY_ID, "The id of the agent key that signed the request."),
        (protocol.HEADER_TIMESTAMP, "Unix nanoseconds when it was signed; at most 300 s off."),
        (
            protocol.HEADER_SIGNATURE,
            "Base64 Ed25519 signature of the method, path, timestamp and the body's SHA-256 "
            "(treemeter_records.protocol.sign_request).",
        ),
    )
]


def signed_agent_key(request: HttpRequest) -> AgentKey | JsonResponse:
    """The agent key that signed this request (method, path, timestamp, and the body unless it is a GET),
    or the 401 answer."""
    agent_id = request.headers.get(protocol.HEADER_AGENT, "")
    key_id = request.headers.get(protocol.HEADER_KEY_ID, "")
    signature = request.headers.get(protocol.HEADER_SIGNATURE, "")
    try:
        timestamp = int(request.headers.get(protocol.HEADER_TIMESTAMP, ""))
    except ValueError:
        return error_response(
            401, "bad_request_signature", f"Unsigned: {protocol.HEADER_TIMESTAMP} must be Unix ns."
        )
    if abs(time.time_ns() - timestamp) > REQUEST_WINDOW_NS:
        return error_response(401, "stale_request", "The request timestamp is more than 300 s off.")
    agent_key = key_with_agent(key_id)
    if (
        agent_key is None
        or agent_key.revoked_at is not None
        or not agent_key.agent.active
        or agent_key.agent.agent_id != agent_id
        or not protocol.verify_request(
            public_key_from_b64(agent_key.public_key),
            signature,
            request.method or "",
            request.path,
            timestamp,
            None if request.method == "GET" else request.body,
        )
    ):
        return error_response(
            401, "bad_request_signature", "Unknown agent key or a signature that does not verify."
        )
    return agent_key
