"""Several agents serving one API key share its quota through platform leases and never overspend it.

Real platform (live server, PostgreSQL), real signatures, real spools; the engine-free layer where the
quota lives (LeasedQuotaBook + spool), then one run through two real agents with the tiny model.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from fastapi.testclient import TestClient

from agents.services import register_agent
from compute_agents.app import create_app
from compute_agents.entitlements import Entitlement, EntitlementStore, quota_period
from compute_agents.leases import GrantCounts, LeaseClient, LeasedQuotaBook, LeaseUnavailable
from compute_agents.runtime import pin_platform_key
from compute_agents.spool import LeaseRequest, QuotaCharge, Spool
from entitlements.models import QuotaLease, QuotaPeriod
from entitlements.services import issue_api_key
from tests.compute_agents.agent_harness import start_agent
from tests.factories import ContractFactory
from treemeter_records import private_key_from_seed, public_key_from_b64, public_key_to_b64

pytestmark = pytest.mark.django_db(transaction=True)

UNREACHABLE = "http://127.0.0.1:9"
_books: list[LeasedQuotaBook] = []


@pytest.fixture(autouse=True)
def _no_prefetch_outlives_its_test() -> Iterator[None]:
    """A background grant still in flight after a test would reach the shared live server while the next
    test flushes the database: every book made here is stopped at the end of its test."""
    yield
    while _books:
        _books.pop().stop()


def _book(spool: Spool, client: LeaseClient, **options: Any) -> LeasedQuotaBook:
    book = LeasedQuotaBook(spool, client, **options)
    _books.append(book)
    return book


@dataclass
class LeasedAgent:
    """One agent's quota layer: its signed lease client, spool and book, and its view of the key."""

    agent_id: str
    key: Any
    spool: Spool
    book: LeasedQuotaBook
    entitlement: Entitlement

    def serve(self, tokens: int, spent: int | None = None) -> bool:
        """Admit a request as the service does: reserve, commit its record with the spend, release."""
        reservation = self.book.reserve(self.entitlement, tokens, time.time_ns())
        if reservation is None:
            return False
        used = tokens if spent is None else spent
        charge = QuotaCharge(reservation.key_hash, reservation.period, used, reservation.lease)
        self.spool.append(lambda seq: {"seq": seq, "agent": self.agent_id}, charge)
        self.book.release(reservation, used)
        return True

    def reopen(self, platform_url: str, **options: Any) -> LeasedAgent:
        """The agent restarted (same spool) against `platform_url`."""
        client = LeaseClient(platform_url, self.agent_id, self.key, attempts=1)
        return LeasedAgent(
            self.agent_id,
            self.key,
            self.spool,
            _book(self.spool, client, **options),
            self.entitlement,
        )


def leased_agent(
    platform_url: str, data_dir: Path, contract: Any, api_key: str, agent_id: str, **options: Any
) -> LeasedAgent:
    key = private_key_from_seed(os.urandom(32))
    register_agent(
        agent_id=agent_id,
        public_key_b64=public_key_to_b64(key),
        tenant_codes=[],
        contract_codes=[contract.code],
    )
    data = data_dir / agent_id
    platform_key = public_key_from_b64(pin_platform_key(platform_url, data))
    store = EntitlementStore(platform_url, agent_id, key, platform_key, data / "entitlements.json")
    store.refresh()
    entitlement = store.lookup(api_key)
    assert entitlement is not None
    spool = Spool(data / "spool.sqlite3")
    book = _book(spool, LeaseClient(platform_url, agent_id, key), **options)
    return LeasedAgent(agent_id, key, spool, book, entitlement)


def ledger(key_hash: str) -> tuple[int, int]:
    row = QuotaPeriod.objects.get(api_key__key_hash=key_hash, period=quota_period(time.time_ns()))
    return row.settled_tokens, row.outstanding_tokens


def spool_spend(agent: LeasedAgent) -> int:
    return agent.spool.quota_used(agent.entitlement.key_hash, quota_period(time.time_ns()))


def run_concurrently(agents: list[LeasedAgent], threads: int, spend: Callable[[int], int]) -> dict[str, int]:
    """`threads` request loops spread over the agents, each until its agent refuses; tokens spent by agent."""
    spent = {agent.agent_id: 0 for agent in agents}
    lock, start = threading.Lock(), threading.Barrier(threads)

    def work(n: int) -> None:
        agent = agents[n % len(agents)]
        start.wait()
        request = 0
        while agent.serve(100, spend(n + request)):
            with lock:
                spent[agent.agent_id] += spend(n + request)
            request += len(agents) * threads

    for agent in agents:
        agent.book.start()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(work, range(threads)))
    for agent in agents:
        agent.book.close()
    return spent


@pytest.mark.parametrize("low_water", [0.0, 0.5], ids=["no-prefetch", "prefetch"])
def test_two_agents_with_concurrent_requests_admit_exactly_the_quota(
    tmp_path: Path, live_server: Any, low_water: float
) -> None:
    contract = ContractFactory.create()
    quota = 12_000
    issued = issue_api_key(contract_code=contract.code, quota_tokens=quota)
    agents = [
        leased_agent(
            live_server.url,
            tmp_path,
            contract,
            issued.secret,
            f"gpu-{n}",
            block_tokens=700,
            low_water=low_water,
            report_s=0.02,
        )
        for n in (1, 2)
    ]
    spent = run_concurrently(agents, 12, lambda _: 100)  # renewals are reported all along

    assert sum(spent.values()) == quota
    assert all(spent[a.agent_id] > 0 for a in agents)
    assert [spool_spend(a) for a in agents] == [spent[a.agent_id] for a in agents]
    assert (sum(a.book.grant_counts().ahead for a in agents) > 0) == (low_water > 0)
    assert ledger(issued.api_key.key_hash) == (quota, 0)
    assert QuotaLease.objects.filter(settled_at__isnull=True).count() == 0
    assert sum(QuotaLease.objects.values_list("spent_tokens", flat=True)) == quota
    assert all(a.book.held() == [] for a in agents)


def test_leases_returned_and_granted_again_while_requests_run_never_overspend(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    quota = 10_000
    issued = issue_api_key(contract_code=contract.code, quota_tokens=quota)
    # Eager settlement (idle after 20 ms) and requests that spend less than they reserve: blocks
    # are returned with their rest and granted again while requests are being admitted.
    options = {"block_tokens": 500, "idle_s": 0.02, "report_s": 0.01, "retry_s": 0.0}
    agents = [
        leased_agent(live_server.url, tmp_path, contract, issued.secret, f"gpu-{n}", **options)
        for n in (1, 2)
    ]
    spent = run_concurrently(agents, 8, lambda n: 40 + n % 61)

    assert 0 < sum(spent.values()) <= quota
    assert [spool_spend(a) for a in agents] == [spent[a.agent_id] for a in agents]
    assert ledger(issued.api_key.key_hash) == (sum(spent.values()), 0)
    assert QuotaLease.objects.count() > 2


def test_reports_settle_the_spool_spend_and_return_the_rest_to_the_other_agent(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=1000)
    one = leased_agent(live_server.url, tmp_path, contract, issued.secret, "gpu-1", block_tokens=1000)
    two = leased_agent(
        live_server.url, tmp_path, contract, issued.secret, "gpu-2", block_tokens=1000, retry_s=0.0
    )
    assert one.serve(200, spent=130) and one.serve(100, spent=40)
    assert not two.serve(100)  # the first agent holds the whole quota
    one.book.settle_once()  # in use: a renewal reports the spend, the block stays held
    assert ledger(issued.api_key.key_hash) == (0, 1000)
    assert QuotaLease.objects.get().spent_tokens == 170
    one.book.close()  # idle: the final report returns the rest
    assert ledger(issued.api_key.key_hash) == (170, 0)
    assert two.serve(800) and not two.serve(31)
    assert two.serve(30)


def test_offline_an_agent_serves_only_within_its_lease_and_an_expired_lease_is_charged(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=1000)
    one = leased_agent(live_server.url, tmp_path, contract, issued.secret, "gpu-1", block_tokens=600)
    two = leased_agent(
        live_server.url, tmp_path, contract, issued.secret, "gpu-2", block_tokens=1000, retry_s=0.0
    )
    assert one.serve(100) and one.serve(100)

    offline = one.reopen(UNREACHABLE, retry_s=0.0)  # restarted while the platform is away
    assert [offline.serve(100) for _ in range(3)] == [True, True, True]  # the spool has the lease
    for _ in range(2):
        with pytest.raises(LeaseUnavailable):
            offline.serve(200)  # 100 left in the lease: no more without the platform
    assert len(one.spool.lease_requests()) == 1  # one unanswered grant request, asked again later
    offline.book.settle_once()  # the report does not get through
    QuotaLease.objects.filter(granted_tokens=600).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert [two.serve(100) for _ in range(5)] == [True, True, True, True, False]  # 600 charged in full
    back = one.reopen(live_server.url)
    back.book.settle_once()  # the unanswered grant is refused now; the platform says the lease expired
    assert one.spool.lease_requests() == []
    assert back.book.held()[0].deadline_ns < time.time_ns()
    back.book.settle_once()  # the late final report reconciles: 500 spent, 100 returned
    assert ledger(issued.api_key.key_hash) == (500, 400)
    assert back.book.held() == []
    assert two.serve(100) and not two.serve(1)


def test_a_grant_whose_answer_never_reached_the_spool_is_recovered_by_its_request_id(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=1000)
    one = leased_agent(live_server.url, tmp_path, contract, issued.secret, "gpu-1")
    request = LeaseRequest("grant-lost-0001", issued.api_key.key_hash, quota_period(time.time_ns()), 600, 100)
    one.spool.lease_requested(request)
    one.book.client.grant(request.api_key, request.period, 600, 100, request.request_id)
    # … and the agent died before it stored the lease: the platform holds 600 for it
    assert ledger(issued.api_key.key_hash) == (0, 600)

    restarted = one.reopen(live_server.url)
    restarted.book.settle_once()  # asks again with the same id: the platform answers the same lease
    assert [h.spooled.granted for h in restarted.book.held()] == [600]
    assert one.spool.lease_requests() == [] and QuotaLease.objects.count() == 1
    assert restarted.serve(600) and not restarted.serve(500)
    restarted.book.close()
    assert ledger(issued.api_key.key_hash) == (600, 0)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Until a background grant has been answered (the book's own counts say so)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the background grant did not finish in time"
        time.sleep(0.005)


def test_below_the_low_water_mark_the_next_block_is_granted_ahead_of_the_requests(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=10_000)
    agent = leased_agent(
        live_server.url, tmp_path, contract, issued.secret, "gpu-1", block_tokens=1000, low_water=0.25
    )
    assert all(agent.serve(100) for _ in range(7))  # 300 left: above the mark (250), nothing asked
    assert agent.book.grant_counts() == GrantCounts(waited=1, ahead=0)
    assert agent.serve(100)  # 200 left: this one starts the next grant in the background
    wait_for(lambda: agent.book.grant_counts().ahead == 1)
    assert [h.spooled.granted for h in agent.book.held()] == [1000, 1000]

    agent.book.client.platform_url = UNREACHABLE  # no grant can happen on a request's path from here
    assert [agent.serve(100) for _ in range(4)] == [True] * 4  # drains the first block, then the second
    assert agent.book.grant_counts() == GrantCounts(waited=1, ahead=1)
    first, second = agent.book.held()
    assert (first.used, first.passed_over, second.used) == (1000, True, 200)
    assert QuotaLease.objects.count() == 2 and agent.spool.lease_requests() == []

    agent.book.client.platform_url = live_server.url
    agent.book.close()  # each lease settled at exactly its spool spend
    assert sorted(QuotaLease.objects.values_list("spent_tokens", flat=True)) == [200, 1000]
    assert ledger(issued.api_key.key_hash) == (1200, 0) == (spool_spend(agent), 0)


def test_a_platform_outage_during_prefetch_fails_no_request_while_the_held_lease_lasts(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=10_000)
    agent = leased_agent(
        live_server.url,
        tmp_path,
        contract,
        issued.secret,
        "gpu-1",
        block_tokens=1000,
        low_water=0.5,
        retry_s=0.0,
    )
    assert agent.serve(100)
    agent.book.client.platform_url = UNREACHABLE
    assert all(agent.serve(100) for _ in range(5))  # 400 left: the prefetch fails in the background
    wait_for(lambda: agent.book.grant_counts().prefetch_failures == 1)
    assert agent.serve(100)  # served from the lease; it tries the prefetch again, which fails too
    wait_for(lambda: agent.book.grant_counts().prefetch_failures == 2)
    assert len(agent.spool.lease_requests()) == 1  # the failed attempts share one request id

    agent.book.client.platform_url = live_server.url
    assert agent.serve(100)  # the platform is back: this reservation's prefetch gets the block
    wait_for(lambda: agent.book.grant_counts().ahead == 1)
    assert agent.book.grant_counts() == GrantCounts(waited=1, ahead=1, prefetch_failures=2)
    assert [h.spooled.granted for h in agent.book.held()] == [1000, 1000]
    assert QuotaLease.objects.count() == 2 and agent.spool.lease_requests() == []

    agent.book.client.platform_url = UNREACHABLE
    assert all(agent.serve(100) for _ in range(4))  # the rest of the old lease, then the new one
    agent.book.client.platform_url = live_server.url
    agent.book.close()
    assert ledger(issued.api_key.key_hash) == (1200, 0) == (spool_spend(agent), 0)


def test_offline_with_nothing_left_a_request_fails_at_once_after_a_failed_prefetch(
    tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=10_000)
    agent = leased_agent(
        live_server.url, tmp_path, contract, issued.secret, "gpu-1", block_tokens=400, retry_s=60.0
    )
    assert agent.serve(100)
    agent.book.client.platform_url = UNREACHABLE
    assert agent.serve(250)  # 50 left, under the mark (100): the prefetch fails
    wait_for(lambda: agent.book.grant_counts().prefetch_failures == 1)
    assert agent.serve(50)  # the lease lasts: served, and no new attempt within retry_s
    with pytest.raises(LeaseUnavailable):
        agent.serve(100)  # nothing left, the platform failed a moment ago: 503 at once
    assert agent.book.grant_counts() == GrantCounts(waited=1, ahead=0, prefetch_failures=1)


def test_a_key_without_quota_needs_no_lease(tmp_path: Path, live_server: Any) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code)
    agent = leased_agent(live_server.url, tmp_path, contract, issued.secret, "gpu-1").reopen(UNREACHABLE)
    reservation = agent.book.reserve(agent.entitlement, 10**9, time.time_ns())
    assert reservation is not None and reservation.lease is None
    assert not QuotaPeriod.objects.exists()


def test_two_real_agents_serving_one_key_stay_within_its_quota(
    tiny_model: Path, tmp_path: Path, live_server: Any
) -> None:
    contract = ContractFactory.create()
    issued = issue_api_key(contract_code=contract.code, quota_tokens=100)
    unused = issue_api_key(contract_code=contract.code, quota_tokens=100)
    harnesses = [
        start_agent(
            live_server.url,
            tiny_model,
            tmp_path / agent_id,
            [contract],
            agent_id=agent_id,
            quota_leases=True,
            lease_block_tokens=30,
        )
        for agent_id in ("gpu-1", "gpu-2")
    ]
    clients = [TestClient(create_app(h.agent.service)) for h in harnesses]
    body = {"model": "tiny", "prompt": "the contract review clause", "max_tokens": 6}
    headers = {"Authorization": f"Bearer {issued.secret}"}

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(
            pool.map(lambda n: clients[n % 2].post("/v1/completions", json=body, headers=headers), range(16))
        )
    for harness in harnesses:
        assert harness.agent.leases is not None
        harness.agent.leases.close()

    served = [a.json()["usage"]["total_tokens"] for a in answers if a.status_code == 200]
    refused = [a.json()["error"]["code"] for a in answers if a.status_code != 200]
    assert served and refused and set(refused) == {"insufficient_quota"}
    assert sum(served) <= 100
    assert ledger(issued.api_key.key_hash) == (sum(served), 0)

    leases = harnesses[0].agent.leases
    assert leases is not None
    leases.client.platform_url = UNREACHABLE  # the platform goes away; the agent holds no lease
    other_key = {"Authorization": f"Bearer {unused.secret}"}
    offline = clients[0].post("/v1/completions", json=body, headers=other_key)
    assert offline.status_code == 503
    assert offline.json()["error"]["code"] == "quota_lease_unavailable"
