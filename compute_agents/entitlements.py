"""API key → entitlement, from the platform's signed snapshot; and quota reservations.

The snapshot is pulled from the platform (the request signed with the agent key), verified against the
pinned platform key, cached on disk and refreshed in the background; when the platform is unreachable
the last verified snapshot keeps serving (up to ``max_stale_s``). Each pull also measures the clock
drift against the platform (NTP-style: platform time minus the midpoint of the round trip).

Quota: a request reserves its worst case (prompt + max_tokens) before the forward pass; the spool
transaction that stores its record adds the tokens actually used, then the reservation is released.
Reservation and check happen under one lock, so concurrent requests cannot overspend.

``QuotaBook`` is the single-agent book: it checks the snapshot's whole quota against this agent's
own spool, so several agents serving one key would each spend all of it. Deployments with more than
one agent use ``compute_agents.leases.LeasedQuotaBook`` (quota leases from the platform) instead.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import structlog
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from treemeter_records import protocol

from .manifest_signature import ManifestTrust
from .releases import Release
from .spool import Spool

log = structlog.get_logger("compute_agents.entitlements")


OPTIONAL_FIELDS = frozenset({"models", "release"})  # a snapshot's key may lack them


class SnapshotError(RuntimeError):
    """No usable snapshot: unreachable platform and no valid cache, or a bad signature."""


@dataclass(frozen=True)
class Entitlement:
    key_hash: str
    prefix: str
    tenant: str
    contract: str
    package: str
    sla_class: str
    quota_tokens: int | None
    status: str
    # The model ids the key's compute package reaches (the snapshot's optional ``models``); empty: any.
    models: frozenset[str] = frozenset()
    # The gray release in force for the key's package (the snapshot's optional ``release``); None: none.
    release: Release | None = None

    @classmethod
    def from_snapshot(cls, entry: dict[str, Any]) -> Entitlement:
        """One key of the signed snapshot."""
        models = entry.get("models") or []
        if not isinstance(models, list) or not all(isinstance(model, str) for model in models):
            raise SnapshotError(f"key {entry.get('prefix')!r}: models must be a list of model ids")
        try:
            release = Release.from_snapshot(entry["release"]) if entry.get("release") is not None else None
        except ValueError as error:
            raise SnapshotError(f"key {entry.get('prefix')!r}: {error}") from None
        fields = {name: entry[name] for name in cls.__dataclass_fields__ if name not in OPTIONAL_FIELDS}
        return cls(**fields, models=frozenset(models), release=release)

    def reaches(self, model_id: str) -> bool:
        """Whether the key's package may use the model ``model_id`` (no list: every model)."""
        return not self.models or model_id in self.models


class EntitlementStore:
    def __init__(
        self,
        platform_url: str,
        agent_id: str,
        agent_key: Ed25519PrivateKey,
        platform_key: Ed25519PublicKey,
        cache_path: Path,
        *,
        max_stale_s: float = 3600.0,
        http: httpx.Client | None = None,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.agent_id = agent_id
        self.agent_key = agent_key
        self.platform_key = platform_key
        self.cache_path = cache_path
        self.max_stale_s = max_stale_s
        self.http = http or httpx.Client(timeout=5.0)
        self.keys: dict[str, Entitlement] = {}
        self.model_keys: list[dict[str, Any]] = []  # the publisher keys registered per model id
        self.issued_ns = 0
        self.refresh_s = 30.0
        self.clock_drift_us = 0
        self._stop = threading.Event()

    def _install(self, envelope: dict[str, Any]) -> dict[str, Any]:
        snapshot, signature = envelope.get("snapshot"), envelope.get("signature")
        if not isinstance(snapshot, dict) or not isinstance(signature, str):
            raise SnapshotError("the entitlement answer is not {snapshot, signature}")
        if not protocol.verify_snapshot(self.platform_key, snapshot, signature):
            raise SnapshotError("the entitlement snapshot's signature does not verify with the platform key")
        if snapshot.get("agent_id") != self.agent_id or snapshot.get("v") != protocol.SNAPSHOT_VERSION:
            raise SnapshotError("the entitlement snapshot is for another agent or version")
        if snapshot["issued_ns"] < self.issued_ns:
            raise SnapshotError("the entitlement snapshot is older than the one in use")
        self.keys = {k["key_hash"]: Entitlement.from_snapshot(k) for k in snapshot["keys"]}
        self.model_keys = list(snapshot.get("model_keys", ()))
        self.issued_ns = snapshot["issued_ns"]
        self.refresh_s = float(snapshot.get("refresh_s", 30))
        return snapshot

    def refresh(self) -> None:
        """Pull, verify, install and cache a fresh snapshot; raises on any failure (the old one stays)."""
        headers = protocol.signed_headers(self.agent_key, self.agent_id, "GET", protocol.SNAPSHOT_PATH)
        sent = int(headers[protocol.HEADER_TIMESTAMP])
        try:
            response = self.http.get(self.platform_url + protocol.SNAPSHOT_PATH, headers=headers)
        except httpx.HTTPError as error:
            raise SnapshotError(f"platform unreachable: {error}") from None
        received = time.time_ns()
        if response.status_code != 200:
            raise SnapshotError(f"platform answered {response.status_code}: {response.text[:200]}")
        envelope = response.json()
        snapshot = self._install(envelope)
        self.clock_drift_us = (snapshot["issued_ns"] - (sent + received) // 2) // 1000
        tmp = self.cache_path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w") as handle:
            json.dump(envelope, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.cache_path)

    def load(self) -> None:
        """Load a snapshot: the platform's, else the disk cache's (an agent starts while it is away)."""
        try:
            self.refresh()
        except SnapshotError as error:
            if not self.cache_path.exists():
                raise SnapshotError(f"{error}; and no cached snapshot at {self.cache_path}") from None
            self._install(json.loads(self.cache_path.read_text()))
            log.warning("snapshot_from_cache", error=str(error), issued_ns=self.issued_ns)

    def start(self) -> None:
        """Load a snapshot unless one is loaded, then refresh in the background."""
        if not self.issued_ns:
            self.load()
        threading.Thread(target=self._refresh_loop, name="entitlements", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except (SnapshotError, ValueError) as error:
                log.warning("snapshot_refresh_failed", error=str(error), age_s=self.age_s())

    def age_s(self) -> float:
        return (time.time_ns() - self.issued_ns) / 1e9

    def stale(self) -> bool:
        return self.age_s() > self.max_stale_s

    def manifest_trust(self) -> ManifestTrust:
        """Whose signature a checkpoint manifest needs: the keys the platform registered for its model."""
        return ManifestTrust.from_entries(self.model_keys)

    def lookup(self, api_key: str) -> Entitlement | None:
        return self.keys.get(protocol.api_key_hash(api_key))


def quota_period(now_ns: int) -> str:
    return datetime.fromtimestamp(now_ns / 1e9, UTC).strftime("%Y-%m")


@dataclass(frozen=True)
class Reservation:
    key_hash: str
    period: str
    tokens: int
    lease: str | None = None  # the platform lease it holds tokens of (LeasedQuotaBook)


class Quota(Protocol):
    """What the service needs of a quota book: hold before the forward pass, release after."""

    def reserve(self, entitlement: Entitlement, tokens: int, now_ns: int) -> Reservation | None: ...

    def release(self, reservation: Reservation, spent: int = 0) -> None: ...


class QuotaBook:
    """Reservations in memory, settled usage in the spool (so it survives restarts)."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.reserved: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def reserve(self, entitlement: Entitlement, tokens: int, now_ns: int) -> Reservation | None:
        """Hold ``tokens`` of the key's monthly quota, or None when they do not fit."""
        period = quota_period(now_ns)
        slot = (entitlement.key_hash, period)
        with self.lock:
            held = self.reserved.get(slot, 0)
            if entitlement.quota_tokens is not None:
                used = self.spool.quota_used(entitlement.key_hash, period)
                if used + held + tokens > entitlement.quota_tokens:
                    return None
            self.reserved[slot] = held + tokens
        return Reservation(entitlement.key_hash, period, tokens)

    def release(self, reservation: Reservation, spent: int = 0) -> None:
        """Called after the record (and its actual usage, ``spent``) is committed, or when the request
        failed; the spool already counts the spend."""
        slot = (reservation.key_hash, reservation.period)
        with self.lock:
            left = self.reserved[slot] - reservation.tokens
            if left:
                self.reserved[slot] = left
            else:
                del self.reserved[slot]
