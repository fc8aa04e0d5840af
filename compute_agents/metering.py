"""Metering: one request's record built from what was measured (hops and their latencies, experts,
cache counts, tokens), committed to the spool with its quota charge, and counted in the metrics.
A request an L1 router decided gets a v2 record: the router's signed decision in it, signed by this
executor's key."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from treemeter_records import make_record, new_record_id, sign_record
from treemeter_records.receipts import make_receipt

from .engine import Engine, Generation, expert_counts
from .entitlements import Entitlement, EntitlementStore, Reservation
from .metrics import AgentMetrics
from .spool import QuotaCharge, Spool, SpoolFull
from .tree.decision import Routed
from .wire import ApiError


@dataclass
class Trip:
    """Timings and identity of one request, for its record."""

    route: str
    client_request_id: str
    record_id: str = field(default_factory=new_record_id)  # its record's id, also the x-request-id
    start_ns: int = field(default_factory=time.time_ns)
    mark: int = field(default_factory=time.perf_counter_ns)
    l1_in_us: int = 0
    # Behind an L1 router: its signed decision (the record is v2, signed), and its decision time plus
    # the way here (transit).
    decision: dict[str, Any] | None = None
    l1_before_us: int = 0
    experts: list[dict[str, int]] = field(default_factory=list)  # the record's, once recorded
    receipt: str | None = None  # the record's receipt (treemeter_records.receipts), once recorded

    @classmethod
    def routed(cls, route: str, client_request_id: str, routed: Routed) -> Trip:
        """A request an L1 router decided: its record id, start, L1 node and path are the router's."""
        claims = routed.claims
        return cls(
            route,
            client_request_id,
            claims["record_id"],
            routed.start_ns,
            decision=routed.decision,
            l1_before_us=claims["l1_in_us"] + routed.transit_us,
        )

    @property
    def l1_node(self) -> str | None:
        """The router's L1 node, when a router decided."""
        return None if self.decision is None else str(self.decision["claims"]["node"])

    @property
    def path(self) -> tuple[str, ...] | None:
        """The router's path, when a router decided."""
        return None if self.decision is None else tuple(self.decision["claims"]["path"])

    @property
    def preheat(self) -> tuple[tuple[int, int], ...]:
        """The experts the router asks L2 to preheat."""
        pairs = [] if self.decision is None else self.decision["claims"]["preheat"]
        return tuple((layer, expert) for layer, expert in pairs)

    def l1_so_far_us(self) -> int:
        return self.l1_before_us + (time.perf_counter_ns() - self.mark) // 1000

    def admitted(self) -> None:
        """L1 on the way in ends here (auth, rules, quota)."""
        self.l1_in_us = self.l1_so_far_us()


@dataclass(frozen=True)
class Usage:
    """What a request used, as its record states it: a generation's tokens, experts and caches, or a
    capability call's items (docs/agent.md); L2 and L3 time in µs."""

    tokens_in: int = 0
    tokens_out: int = 0
    experts: list[dict[str, int]] = field(default_factory=list)
    prefix_cache_hit_tokens: int = 0
    prefix_cache_write_tokens: int = 0
    expert_cache_hits: int = 0
    expert_cache_misses: int = 0
    l2_us: int = 0
    l3_us: int = 0
    ran: bool = False  # something was produced: its tokens, experts and layer latencies are counted


class ServedModel(Protocol):
    """What a record names as the model that ran: the engine's checkpoint, or a capability's model."""

    @property
    def model_id(self) -> str: ...

    @property
    def weights_sha3(self) -> str: ...


@dataclass(frozen=True)
class AgentIdentity:
    agent_id: str
    node: str  # this host's L3 node name
    cache_node: str
    key: Ed25519PrivateKey | None = None  # signs the v2 records of requests a router decided


class Meter:
    """Records of requests, each committed to the spool (with its quota charge) before it is answered."""

    def __init__(
        self,
        identity: AgentIdentity,
        engine: Engine,
        spool: Spool,
        entitlements: EntitlementStore,
        l1_node: str,
        metrics: AgentMetrics,
    ) -> None:
        self.identity = identity
        self.engine = engine
        self.spool = spool
        self.entitlements = entitlements
        self.l1_node = l1_node
        self.metrics = metrics

    def record(
        self,
        trip: Trip,
        entitlement: Entitlement,
        choices: Sequence[Generation],
        status: str,
        path: tuple[str, ...],
        *,
        tokens_in: int = 0,
        reservation: Reservation | None = None,
    ) -> dict[str, Any]:
        """Build, spool and count the record of a request's ``choices`` (none when nothing was
        generated); ``reservation``'s key is charged the tokens used. The prompt counts once, as in
        OpenAI's usage, and the experts of every choice (each ran its own forward passes)."""
        usage = self._usage_of(choices) if choices else Usage(tokens_in=tokens_in)
        return self.record_usage(trip, entitlement, usage, status, path, reservation=reservation)

    def _usage_of(self, choices: Sequence[Generation]) -> Usage:
        routed = torch.cat([choice.routed for choice in choices])
        first = choices[0]
        return Usage(
            tokens_in=first.tokens_in,
            tokens_out=sum(choice.tokens_out for choice in choices),
            experts=expert_counts(routed, self.engine.num_experts),
            prefix_cache_hit_tokens=first.prefix_cache_hit_tokens,
            prefix_cache_write_tokens=first.prefix_cache_write_tokens,
            expert_cache_hits=sum(choice.expert_cache_hits for choice in choices),
            expert_cache_misses=sum(choice.expert_cache_misses for choice in choices),
            l2_us=sum(choice.l2_us for choice in choices),
            l3_us=sum(choice.l3_us for choice in choices),
            ran=True,
        )

    def record_usage(
        self,
        trip: Trip,
        entitlement: Entitlement,
        usage: Usage,
        status: str,
        path: tuple[str, ...],
        *,
        reservation: Reservation | None = None,
        model: ServedModel | None = None,
    ) -> dict[str, Any]:
        """Build, spool and count the record of what a request used on ``model`` (default: the engine's
        checkpoint); ``reservation``'s key is charged its tokens in and out."""
        model = model or self.engine
        l1_in = trip.l1_in_us or trip.l1_so_far_us()
        hop_latency = {"L2": usage.l2_us, "L3": usage.l3_us}
        nodes = {"L1": trip.l1_node or self.l1_node, "L2": self.identity.cache_node, "L3": self.identity.node}
        end_ns = time.time_ns()
        l1_out = max(0, (end_ns - trip.start_ns) // 1000 - l1_in - usage.l2_us - usage.l3_us)
        hops = []
        for index, layer in enumerate(path):
            latency = (l1_in if index == 0 else l1_out) if layer == "L1" else hop_latency[layer]
            hops.append({"layer": layer, "node": nodes[layer], "latency_us": latency})
        charge = (
            QuotaCharge(
                reservation.key_hash,
                reservation.period,
                usage.tokens_in + usage.tokens_out,
                reservation.lease,
            )
            if reservation is not None
            else None
        )

        def build(seq: int) -> dict[str, Any]:
            record = make_record(
                agent_id=self.identity.agent_id,
                seq=seq,
                record_id=trip.record_id,
                tenant=entitlement.tenant,
                contract=entitlement.contract,
                package=entitlement.package,
                sla_class=entitlement.sla_class,
                client_request_id=trip.client_request_id,
                model_id=model.model_id,
                weights_sha3=model.weights_sha3,
                start_ns=trip.start_ns,
                end_ns=end_ns,
                clock_drift_us=self.entitlements.clock_drift_us,
                tokens_in=usage.tokens_in,
                tokens_out=usage.tokens_out,
                hops=hops,
                experts=usage.experts,
                prefix_cache_hit_tokens=usage.prefix_cache_hit_tokens,
                prefix_cache_write_tokens=usage.prefix_cache_write_tokens,  # left out of the record when 0
                expert_cache_hits=usage.expert_cache_hits,
                expert_cache_misses=usage.expert_cache_misses,
                status=status,
            )
            if trip.decision is None:
                return record
            if self.identity.key is None:
                raise RuntimeError("an executor behind a router signs its records: it needs its key")
            return sign_record(record, trip.decision, self.identity.key)

        try:
            spooled = self.spool.append(build, charge)
        except SpoolFull as full:
            raise ApiError(503, "server_error", "spool_full", str(full)) from None
        record = spooled.record
        self._observe(trip, record, usage.ran)
        trip.experts = record["experts"]
        if self.identity.key is not None:
            trip.receipt = make_receipt(self.identity.key, record, spooled.line)
        return record

    def _observe(self, trip: Trip, record: dict[str, Any], ran: bool) -> None:
        m = self.metrics
        m.requests.labels(trip.route, record["status"]).inc()
        if not ran:
            return
        m.tokens.labels("in").inc(record["tokens_in"])
        m.tokens.labels("out").inc(record["tokens_out"])
        for entry in record["experts"]:
            m.expert_activations.labels(str(entry["layer"]), str(entry["expert"])).inc(entry["tokens"])
        m.observe_cache(record["expert_cache_hits"], record["expert_cache_misses"])
        for hop in record["hops"]:
            m.layer_latency.labels(hop["layer"]).observe(hop["latency_us"] / 1e6)
