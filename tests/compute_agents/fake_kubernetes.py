"""A local fake of the Kubernetes API that serves the one resource the autoscaler's actuator uses:
``apps/v1`` Deployments' ``scale`` subresource, over a real socket (the cluster cannot be reached here)."""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kubernetes.client import ApiClient, Configuration

SCALE_PATH = re.compile(r"^/apis/apps/v1/namespaces/(?P<namespace>[^/]+)/deployments/(?P<name>[^/]+)/scale$")
# What the API server takes in a PATCH of a scale subresource (apply-patch needs a fieldManager and is not
# sent here); anything else is 415 UnsupportedMediaType.
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes


class Refused(Exception):
    """An answer with a Kubernetes ``Status`` object, as the API server gives it."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        if details:
            self.status["details"] = details


class FakeKubernetes:
    """GET and PATCH ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale``, bearer token checked,
    every request recorded. Nothing runs the Deployments: ``status.replicas`` stays what was created.
    JSON Patch takes ``add`` and ``replace`` only; merge and strategic merge are the same for a Scale."""

    def __init__(self, token: str, deployments: dict[tuple[str, str], int]) -> None:
        self.token = token
        self.wanted = dict(deployments)
        self.running = dict(deployments)
        self.received: list[Received] = []
        self._version = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def answer(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.received.append(Received(method, path, headers, body))
            try:
                return 200, self._answer(method, path.partition("?")[0], headers, body)
            except Refused as refused:
                return refused.code, refused.status

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        if headers.get("authorization") != f"Bearer {self.token}":
            raise Refused(401, "Unauthorized", "Unauthorized")
        found = SCALE_PATH.match(path)
        if found is None:
            raise Refused(404, "NotFound", "the server could not find the requested resource")
        key = (found["namespace"], found["name"])
        content_type = headers.get("content-type", "").partition(";")[0].strip()
        if method == "PATCH" and content_type not in PATCH_TYPES:
            raise Refused(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(PATCH_TYPES),
            )
        if key not in self.wanted:
            raise Refused(
                404,
                "NotFound",
                f'deployments.apps "{key[1]}" not found',
                {"name": key[1], "group": "apps", "kind": "deployments"},
            )
        if method == "PATCH":
            self._patch(key, content_type, body)
        return self._scale(key)

    def _patch(self, key: tuple[str, str], content_type: str, body: bytes) -> None:
        try:
            patch = json.loads(body)
        except ValueError as error:
            raise Refused(400, "BadRequest", f"error decoding patch: {error}") from None
        current = self._scale(key)
        if content_type == "application/json-patch+json":
            patched = _json_patch(current, patch)
        elif isinstance(patch, dict):
            patched = _merge_patch(current, patch)
        else:
            raise Refused(400, "BadRequest", "the patch is not a JSON object")
        replicas = patched.get("spec", {}).get("replicas", 0)
        if not isinstance(replicas, int) or replicas < 0:
            raise Refused(
                422, "Invalid", f'Scale.autoscaling "{key[1]}" is invalid: spec.replicas: {replicas}'
            )
        if replicas != self.wanted[key]:
            self.wanted[key] = replicas
            self._version += 1

    def _scale(self, key: tuple[str, str]) -> dict[str, Any]:
        namespace, name = key
        wanted = self.wanted[key]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{name}")),
                "resourceVersion": str(self._version),
                "creationTimestamp": "2026-11-02T09:00:00Z",
            },
            "spec": {"replicas": wanted} if wanted else {},  # omitempty, as the API server writes it
            "status": {"replicas": self.running[key], "selector": f"app={name}"},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._serve()

            def do_PATCH(self) -> None:
                self._serve()

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                code, answer = fake.answer(self.command, self.path, headers, body)
                encoded = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = _merge_patch(merged.get(name), value)
    return merged


def _json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902, its ``add`` and ``replace`` operations."""
    if not isinstance(operations, list):
        raise Refused(
            400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        )
    patched = copy.deepcopy(target)
    for operation in operations:
        if operation.get("op") not in ("add", "replace") or not str(operation.get("path", "")).startswith(
            "/"
        ):
            raise Refused(422, "Invalid", f"unsupported JSON Patch operation: {operation}")
        *parents, last = operation["path"][1:].split("/")
        node = patched
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = operation["value"]
    return patched


def client_for(url: str, token: str) -> ApiClient:
    return ApiClient(
        Configuration(host=url, api_key={"authorization": token}, api_key_prefix={"authorization": "Bearer"})
    )
