"""The L1 router: the customer's key checked against the entitlement snapshot, the three-stage decision
(syntax is the executor's, then the semantic classifier and the policy table), an executor of the
policy's subtree chosen by load, the request sent with the router's signed decision, and failover.

Which requests leave a router record (committed to the router's own spool, with the L1 hop alone, and
shipped like an agent's): those it refuses after authentication (a bad body, a rules violation, a model
no executor serves) as unbilled ``rejected`` records, as an executor would, and those no executor could
serve as unbilled ``error`` records. Every request an executor answers is recorded by that executor,
under the record id, start, path and L1 node of the router's decision. A request the router took and
never finished because it died (``tree/inflight.py``) gets, when it starts again, an unbilled ``error``
record that supersedes its attempts.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from treemeter_records import make_record, new_record_id, protocol, sign_record
from treemeter_records.receipts import RECEIPT_HEADER, make_receipt
from treemeter_records.validation import SUPERSEDES_MAX

from ..admission import authenticate, check_rules, model_not_found
from ..entitlements import Entitlement, EntitlementStore
from ..params import parse_request
from ..router import Decision, Rules, classifiable_text
from ..scheduler.config import TreeConfig
from ..spool import Spool, SpoolFull
from ..wire import ApiError
from .decision import DECISION_HEADER, decision_claims, encode_decision
from .inflight import InFlightLedger
from .lines import SubtreeLines
from .preparation import DomainExperts, parse_experts_header
from .registry import Executor, Heartbeat, HeartbeatError, Registry
from .scheduling import TreeScheduling

NO_WEIGHTS = "0" * 64  # a router record for a model no executor ever reported: no weights ran
FORWARDED_HEADERS = ("authorization", "content-type", "x-request-id", "openai-organization")
DECISIONS_KEPT = 10_000  # decision times kept for /tree/stats' percentiles


@dataclass
class TreeStats:
    """What the router has routed, for ``GET /tree/stats`` and ``make run``'s summary."""

    by_executor: Counter[str] = field(default_factory=Counter)
    by_domain: Counter[str] = field(default_factory=Counter)
    by_path: Counter[str] = field(default_factory=Counter)
    failovers: int = 0
    unserved: int = 0
    early_exits: int = 0  # decisions the classifier made on its encoder's first layers
    fallbacks: Counter[str] = field(default_factory=Counter)  # by the subtree fallen back from
    decision_us: deque[int] = field(default_factory=lambda: deque(maxlen=DECISIONS_KEPT))
    lock: threading.Lock = field(default_factory=threading.Lock)  # decisions are made in a thread pool

    def decided(self, decision: Decision, elapsed_us: int) -> None:
        with self.lock:
            self.decision_us.append(elapsed_us)
            self.by_domain[decision.domain or "-"] += 1
            self.by_path[">".join(decision.path)] += 1
            self.early_exits += decision.early_exit

    def fell_back(self, subtree: str) -> None:
        with self.lock:
            self.fallbacks[subtree] += 1

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            ordered = sorted(self.decision_us)

        def pct(q: float) -> int | None:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None

        return {
            "by_executor": dict(self.by_executor),
            "by_domain": dict(self.by_domain),
            "by_path": dict(self.by_path),
            "failovers": self.failovers,
            "unserved": self.unserved,
            "fallbacks": dict(self.fallbacks),
            "decision_us": {"p50": pct(0.5), "p99": pct(0.99), "count": len(ordered)},  # the last ones
            "decisions": sum(self.by_domain.values()),
            "early_exits": self.early_exits,
        }


class Party(Protocol):
    """Whose a router record is: an entitlement, or a request the router lost (``LostRequest``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def contract(self) -> str: ...
    @property
    def package(self) -> str: ...
    @property
    def sla_class(self) -> str: ...


@dataclass
class Routing:
    """One request on its way: who asked, what L1 decided, when it arrived."""

    route: str
    entitlement: Entitlement
    decision: Decision
    model: str
    start_ns: int
    mark: int
    queued_us: int = 0  # a queued job: from the receipt to this dispatch (``mark``)
    experts: list[list[int]] = field(default_factory=list)  # the domain's predicted [layer, expert]s
    ticket: str = field(default_factory=lambda: uuid.uuid4().hex)  # its rows in the in-flight ledger

    def elapsed_us(self) -> int:
        return _since(self.mark)


class RouterService:
    def __init__(
        self,
        agent_id: str,
        key: Ed25519PrivateKey,
        rules: Rules,
        entitlements: EntitlementStore,
        spool: Spool,
        registry: Registry,
        executor_keys: dict[str, Ed25519PublicKey],
        inflight: InFlightLedger,
        tree: TreeConfig | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.key = key
        self.rules = rules
        self.entitlements = entitlements
        self.spool = spool
        self.registry = registry
        self.executor_keys = executor_keys
        self.inflight = inflight
        self.tree = tree
        self.lines = SubtreeLines(tree, registry.capacity) if tree is not None else None
        self.scheduling: TreeScheduling | None = None  # set with a tree config (tree.runtime)
        self.stats = TreeStats()
        self.experts = DomainExperts()

    def admit(self, route: str, authorization: str | None, body: Any) -> Routing:
        """Authenticate, check and decide; nothing external is asked (the snapshot and the rules are
        local). A refusal after authentication leaves a ``rejected`` record."""
        start_ns, mark = time.time_ns(), time.perf_counter_ns()
        entitlement = authenticate(self.spool, self.entitlements, authorization)
        try:
            request = parse_request(route, body)
            check_rules(self.rules, route, body)
            if not self.registry.executors:  # just started: nobody has reported yet
                raise ApiError(
                    503, "server_error", "no_executor", "No executor has reported to this router yet."
                )
            if self._card(entitlement, request.model) is None:
                raise model_not_found(request.model)
        except ApiError as error:
            raise self._refuse(error, entitlement, body, start_ns, mark) from None
        decision = self.rules.decide(classifiable_text(body), entitlement.package, entitlement.sla_class)
        experts = self.experts.preheat(decision.domain)
        routing = Routing(route, entitlement, decision, request.model, start_ns, mark, experts=experts)
        self.stats.decided(decision, routing.elapsed_us())
        return routing

    def _refuse(
        self, error: ApiError, entitlement: Entitlement, body: Any, start_ns: int, mark: int
    ) -> ApiError:
        """A refusal after authentication: an unbilled ``rejected`` record (``error`` for a 5xx)."""
        model = body.get("model") if isinstance(body, dict) else None
        model_name = model if isinstance(model, str) and self._card(entitlement, model) else ""
        status = "error" if error.status >= 500 else "rejected"
        error.headers.update(self._record(entitlement, model_name, start_ns, _since(mark), status))
        return error

    def _card(self, entitlement: Entitlement, model: str) -> Heartbeat | None:
        """The card of the model a request names, if some executor serves it and the key's package may
        reach it: another package's model is as unknown as one nobody serves, in the answer and the record."""
        card = self.registry.model_card(model)
        return card if card is not None and entitlement.reaches(card.model_id) else None

    def headers_for(
        self,
        routing: Routing,
        executor: Executor,
        incoming: dict[str, str],
        supersedes: tuple[str, ...] = (),
    ) -> tuple[str, dict[str, str]]:
        """A new record id for this attempt, and the headers that carry the signed decision (naming the
        earlier attempts it supersedes, see ``forward``, and a queued job's wait, see ``jobs``)."""
        record_id = new_record_id()
        decision = routing.decision
        claims = decision_claims(
            record_id=record_id,
            router=self.agent_id,
            node=self.rules.node,
            rules_sha256=self.rules.sha256,
            decision=decision,
            executor=executor.beat.executor,
            preheat=routing.experts if "L2" in decision.path else [],
            l1_in_us=routing.elapsed_us(),
            supersedes=supersedes,
            queued_us=routing.queued_us,
        )
        headers = {name: incoming[name] for name in FORWARDED_HEADERS if name in incoming}
        headers[DECISION_HEADER] = encode_decision(claims, self.key)
        return record_id, headers

    def fallback(self, routing: Routing) -> Routing:
        """``routing`` as it goes: to its subtree, or, while that subtree's breaker is open (timeouts),
        to the subtree's fallback in the tree config, the decision naming the subtree it falls back from."""
        subtree = self.tree.subtrees.get(routing.decision.subtree) if self.tree is not None else None
        if subtree is None or subtree.fallback is None or self.registry.subtree_allows(subtree.name):
            return routing
        self.stats.fell_back(subtree.name)
        decision = replace(routing.decision, subtree=subtree.fallback, fallback_from=subtree.name)
        return replace(routing, decision=decision)

    def priority(self, routing: Routing) -> int:
        """The request's place in its subtree's line: the tree config's rule for its package and SLA
        class (higher first)."""
        subtree = self.tree.subtrees.get(routing.decision.subtree) if self.tree is not None else None
        entitlement = routing.entitlement
        return subtree.priority(entitlement.package, entitlement.sla_class) if subtree is not None else 0

    def queue_full(self, routing: Routing) -> ApiError:
        """The subtree's line is full: 429 and an unbilled ``rejected`` record."""
        subtree = routing.decision.subtree
        named = self._record(
            routing.entitlement, routing.model, routing.start_ns, routing.elapsed_us(), "rejected"
        )
        waiting = self.lines.waiting(subtree) if self.lines is not None else 0
        return ApiError(
            429,
            "rate_limit_exceeded",
            "queue_full",
            f"Subtree '{subtree}' is at its concurrency and {waiting} requests already wait; retry shortly.",
            headers={**named, "Retry-After": "1", "x-should-retry": "true"},
        )

    def attempting(
        self, routing: Routing, executor: Executor, incoming: dict[str, str], supersedes: tuple[str, ...]
    ) -> tuple[str, dict[str, str]]:
        """``headers_for`` an interactive request's attempt, written to the in-flight ledger before it
        is sent (``settled`` takes the request out once its answer is handed over)."""
        record_id, headers = self.headers_for(routing, executor, incoming, supersedes)
        lost = {
            "tenant": routing.entitlement.tenant,
            "contract": routing.entitlement.contract,
            "package": routing.entitlement.package,
            "sla_class": routing.entitlement.sla_class,
            "model": routing.model,
            "start_ns": routing.start_ns,
            "l1_us": routing.elapsed_us(),
            "decision": routing.decision.as_json(),
        }
        self.inflight.opened(routing.ticket, record_id, lost)
        return record_id, headers

    def settled(self, routing: Routing) -> None:
        self.inflight.settled(routing.ticket)

    def recover_lost(self) -> int:
        """At start: each request an earlier process of this router left in flight gets an unbilled
        ``error`` record superseding its attempts (L1 alone, the decision's time); how many."""
        lost = self.inflight.lost()
        for request in lost:
            self._record(
                request,
                request.model,
                request.start_ns,
                request.l1_us,
                "error",
                Decision.from_json(request.decision),
                0,
                request.attempts[-SUPERSEDES_MAX:],
            )
            self.inflight.settled(request.request)
        return len(lost)

    def learn(self, routing: Routing, header: str | None) -> None:
        """What the executor reported its request used: the next preheats of the domain."""
        if header:
            self.experts.learn(routing.decision.domain, parse_experts_header(header))

    def answered(self, routing: Routing) -> None:
        """An answer relayed whole: its latency (arrival to the end of its body) for the autoscaler."""
        if self.scheduling is not None:
            self.scheduling.observe(routing.decision.subtree, routing.elapsed_us() / 1000)

    def served(self, executor: Executor, attempts: int) -> None:
        self.stats.by_executor[executor.beat.executor] += 1
        self.stats.failovers += attempts - 1

    def unserved(self, routing: Routing, tried: list[str], unanswered: list[str]) -> ApiError:
        """No executor could serve: the unbilled ``error`` record, and the customer's 503. When some
        attempt was sent and never answered (it may have run), the record is signed as a v2 record
        whose decision supersedes those attempts, so the customer who got a 503 is billed nothing."""
        self.stats.unserved += 1
        self.stats.failovers += max(0, len(tried) - 1)
        named = self._record(
            routing.entitlement,
            routing.model,
            routing.start_ns,
            routing.elapsed_us(),
            "error",
            routing.decision,
            routing.queued_us,
            tuple(unanswered),
        )
        detail = f"tried {', '.join(tried)}" if tried else "none is healthy"
        return ApiError(
            503,
            "server_error",
            "no_executor",
            f"No executor of subtree '{routing.decision.subtree}' can serve this request now ({detail}).",
            headers=named,
        )

    def _record(
        self,
        party: Party,
        model: str,
        start_ns: int,
        latency: int,
        status: str,
        decision: Decision | None = None,
        queued_us: int = 0,
        supersedes: tuple[str, ...] = (),
    ) -> dict[str, str]:
        """A router record: the L1 hop alone (``latency`` µs), no tokens, never billed; the answer's
        headers naming it (``x-request-id``, its receipt signed by the router's key). With ``supersedes``,
        a v2 record whose ``decision`` supersedes those attempts."""
        card = self.registry.model_card(model)
        end_ns = start_ns + (latency + queued_us) * 1000
        record_id = new_record_id()

        def build(seq: int) -> dict[str, Any]:
            record = make_record(
                agent_id=self.agent_id,
                seq=seq,
                record_id=record_id,
                tenant=party.tenant,
                contract=party.contract,
                package=party.package,
                sla_class=party.sla_class,
                client_request_id=f"req-{record_id}",
                model_id=card.model_id if card else "unknown",  # no model ran
                weights_sha3=card.weights_sha3 if card else NO_WEIGHTS,
                start_ns=start_ns,
                end_ns=end_ns,
                clock_drift_us=self.entitlements.clock_drift_us,
                tokens_in=0,
                tokens_out=0,
                hops=[{"layer": "L1", "node": self.rules.node, "latency_us": latency}],
                experts=[],
                prefix_cache_hit_tokens=0,
                expert_cache_hits=0,
                expert_cache_misses=0,
                status=status,
            )
            if decision is None or not supersedes:
                return record
            return self._superseding(record, decision, queued_us, latency, supersedes)

        try:
            spooled = self.spool.append(build)
        except SpoolFull as full:
            raise ApiError(503, "server_error", "spool_full", str(full)) from None
        return {
            "x-request-id": record_id,
            RECEIPT_HEADER: make_receipt(self.key, spooled.record, spooled.line),
        }

    def _superseding(
        self,
        record: dict[str, Any],
        decision: Decision,
        queued_us: int,
        latency_us: int,
        supersedes: tuple[str, ...],
    ) -> dict[str, Any]:
        """The router's own record as v2: a decision naming the router as its executor, over the L1 hop
        alone, superseding ``supersedes``; both signatures are the router's."""
        claims = decision_claims(
            record_id=record["record_id"],
            router=self.agent_id,
            node=self.rules.node,
            rules_sha256=self.rules.sha256,
            decision=decision,
            executor=self.agent_id,
            l1_in_us=latency_us,
            preheat=[],
            supersedes=supersedes,
            queued_us=queued_us,
        )
        claims["path"] = ["L1"]
        claims["decided_ns"] = record["start_ns"] + (latency_us + queued_us) * 1000
        return sign_record(record, protocol.sign_decision(self.key, claims), self.key)

    def heartbeat(self, headers: dict[str, str], path: str, body: bytes, parsed: Any) -> Heartbeat:
        """A signed heartbeat from a known executor (its key pinned in the router's executor keys)."""
        beat = Heartbeat.parse(parsed)
        key = self.executor_keys.get(beat.executor)
        agent = headers.get(protocol.HEADER_AGENT.lower())
        try:
            timestamp = int(headers.get(protocol.HEADER_TIMESTAMP.lower(), ""))
        except ValueError:
            raise HeartbeatError("bad heartbeat: no timestamp") from None
        signature = headers.get(protocol.HEADER_SIGNATURE.lower(), "")
        if key is None or agent != beat.executor:
            raise PermissionError(f"executor '{beat.executor}' is not one of this router's executors")
        if abs(time.time_ns() - timestamp) > 60 * 10**9:
            raise PermissionError("the heartbeat's timestamp is outside the 60 s window")
        if not protocol.verify_request(key, signature, "POST", path, timestamp, body):
            raise PermissionError("the heartbeat's signature does not verify against the executor's key")
        self.registry.heartbeat(beat)
        return beat

    def served_names(self) -> list[str]:
        return self.registry.served_names()


def _since(mark: int) -> int:
    return (time.perf_counter_ns() - mark) // 1000
