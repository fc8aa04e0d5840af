"""The asynchronous path as real processes: a live platform, the router with a job queue on the real
Redis broker, an executor, and `jobs-worker` (a real Celery worker). A request class the policy queues
answers 202 with a job; the job is polled, called back with the router's signature, and billed once
with its queue wait as its own measured hop, also when the worker or the router dies mid-job. The
Batch API is driven with the official `openai` SDK."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from clickhouse_store import query
from clickhouse_store.queries.billing import superseded_attempts
from compute_agents.jobs.callbacks import SIGNATURE_HEADER, verify_callback
from entitlements.services import issue_api_key
from tests.compute_agents.test_tree_chaos import Tree, wait_for
from tests.factories import ContractFactory
from treemeter_records import public_key_from_b64

STRANGER = "other-contract"
pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db(transaction=True)]

QUEUED_RULES = {
    "version": 1,
    "syntax": [
        {"route": "^/v1/(chat/)?completions$", "param": "model", "pattern": "^[A-Za-z0-9._:/-]{1,128}$"}
    ],
    "limits": {"max_tokens": 512},
    "policy": [{"package": "*", "sla_class": "*", "path": ["L1", "L3", "L1"], "queued": True}],
}


class JobsTree(Tree):
    """A router with a job queue, one executor, and job workers."""

    queue: str = ""
    broker: str = ""
    stranger_key: str = ""  # a key of another contract the same router serves

    def start_queued_router(self) -> None:
        rules = self.root / "rules.json"
        rules.write_text(json.dumps(QUEUED_RULES))
        self.start_router(
            30,
            *("--rules", str(rules), "--jobs-broker", self.broker, "--jobs-queue", self.queue),
            "--allow-private-callbacks",  # the test's receiver is on loopback
        )

    def start_worker(self, name: str) -> None:
        directory = self.root / name
        directory.mkdir(exist_ok=True)
        self.processes[name] = self._spawn(
            directory,
            *("jobs-worker", "--broker", self.broker, "--queue", self.queue, "--concurrency", "2"),
            *("--visibility-timeout", "3", "--allow-private-callbacks"),
        )

    def alive(self) -> list[Any]:
        return list(self.processes.values())

    def kill(self, name: str) -> float:
        """SIGKILL, and forgotten (a restart of the same name is a new process)."""
        killed = super().kill(name)
        del self.processes[name]
        return killed

    def submit(
        self, prompt: str, max_tokens: int = 24, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        answer = httpx.post(
            self.router_url + "/v1/completions",
            # greedy: a long job runs its whole length (sampled, the tiny model may stop early)
            json={"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
            headers={"authorization": f"Bearer {self.api_key}", **(headers or {})},
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        assert answer.headers["location"] == f"/v1/jobs/{answer.json()['id']}"
        job: dict[str, Any] = answer.json()
        return job

    def job(self, job_id: str, api_key: str | None = None) -> httpx.Response:
        headers = {"authorization": f"Bearer {api_key or self.api_key}"}
        return httpx.get(f"{self.router_url}/v1/jobs/{job_id}", headers=headers, timeout=10)

    def finished(self, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = {}

        def done() -> bool:
            found.update(self.job(job_id).json())
            return found["status"] in ("completed", "failed")

        wait_for(done, f"job {job_id}", self.alive())
        return found


@pytest.fixture
def jobs_tree(tmp_path: Path, live_server: Any, redis_url: str) -> Iterator[JobsTree]:
    contract = ContractFactory.create()
    other = ContractFactory.create(code=STRANGER)
    made = JobsTree(tmp_path, live_server.url, contract, issue_api_key(contract_code=contract.code).secret)
    made.broker, made.queue = redis_url, f"jobs-{uuid.uuid4().hex[:8]}"
    made.stranger_key = issue_api_key(contract_code=other.code).secret
    made.extra_contracts = [other.code]

    made.register("router-1", live_server.url, kind="router")
    made.register("exec-a", live_server.url)
    yield made
    for process in made.processes.values():
        if process.poll() is None:
            process.kill()
            process.wait()


class Receiver:
    """A customer's webhook endpoint on loopback: keeps each delivery's body and headers."""

    def __init__(self) -> None:
        deliveries: list[tuple[bytes, dict[str, str]]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                deliveries.append((body, {k.lower(): v for k, v in self.headers.items()}))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.deliveries = deliveries
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/jobs"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _records(contract: str) -> list[tuple[str, str, int, int, str]]:
    """(record id, status, queue_latency_us, start_ns, agent) of the contract's stored records."""
    rows = query.select(
        "SELECT toString(record_id), status, queue_latency_us, start_ns, agent_id "
        f"FROM {query.RECORDS} WHERE contract = {{c:String}} ORDER BY start_ns",
        {"c": contract},
    )
    return [tuple(row) for row in rows]


def _billed(contract: str) -> list[str]:
    """The contract's billed record ids: ok, and superseded by no retry (billing.exclusions)."""
    now = datetime.now(UTC)
    superseded = {a.record_id for a in superseded_attempts([contract], now - timedelta(days=1), now)}
    return [r for r, status, *_ in _records(contract) if status == "ok" and r not in superseded]


def test_a_queued_request_is_a_job_polled_called_back_and_billed_with_its_queue_hop(
    jobs_tree: JobsTree, tiny_model: Path, live_server: Any
) -> None:
    tree = jobs_tree
    receiver = Receiver()
    tree.start_queued_router()
    tree.start_executor("exec-a", tiny_model)
    tree.healthy(1)
    # Queued before any worker runs: the job waits in the queue, and says so.
    accepted = tree.submit("review this clause", headers={"x-treemeter-callback-url": receiver.url})
    assert (accepted["object"], accepted["status"]) == ("job", "queued")
    time.sleep(1.0)
    assert tree.job(accepted["id"]).json()["status"] == "queued"
    assert tree.job(accepted["id"], tree.stranger_key).status_code == 404  # another contract: no such job

    tree.start_worker("worker-1")
    job = tree.finished(accepted["id"])
    assert job["status"] == "completed", job
    result = job["result"]
    assert result["status_code"] == 200 and result["body"]["choices"][0]["text"]
    assert result["body"]["object"] == "text_completion"

    wait_for(lambda: len(receiver.deliveries) >= 1, "the callback", tree.alive())
    body, headers = receiver.deliveries[0]
    assert json.loads(body)["id"] == accepted["id"] and json.loads(body)["status"] == "completed"
    key = httpx.get(tree.router_url + "/v1/jobs/callback-key").json()
    assert key["public_key"] == tree.keys["router-1"]
    assert verify_callback(public_key_from_b64(key["public_key"]), headers[SIGNATURE_HEADER], body)
    assert not verify_callback(public_key_from_b64(key["public_key"]), headers[SIGNATURE_HEADER], body + b" ")

    tree.stop_and_drain(live_server.url)
    [record] = [r for r in _records(tree.contract.code) if r[0] == result["request_id"]]
    _, status, queue_us, start_ns, agent = record
    assert (status, agent) == ("ok", "exec-a")
    assert queue_us >= 1_000_000  # it waited at least the second before the worker started
    assert start_ns <= accepted["created_at"] * 10**9 + 10**9  # the record starts at the receipt
    assert _billed(tree.contract.code) == [result["request_id"]]


def test_a_job_survives_its_worker_and_its_router_and_is_billed_once(
    jobs_tree: JobsTree, tiny_model: Path, live_server: Any
) -> None:
    tree = jobs_tree
    tree.start_queued_router()
    tree.start_executor("exec-a", tiny_model)
    tree.healthy(1)
    tree.start_worker("worker-1")
    first = tree.submit("first job", max_tokens=400)  # seconds of work: time to die in the middle
    # The worker dies while the router runs the job: the router finishes it, and the message, never
    # acknowledged, comes back to the next worker, which gets the stored answer (no second run).
    wait_for(
        lambda: tree.job(first["id"]).json()["status"] != "queued",
        "a dispatch",
        tree.alive(),
    )
    tree.kill("worker-1")
    tree.start_worker("worker-2")
    assert tree.finished(first["id"])["status"] == "completed"

    # The router dies while the job runs at the executor; restarted on the same port, it dispatches the
    # job again (the worker retries), naming the lost attempt in its decision's `supersedes`.
    second = tree.submit("a long contract", max_tokens=400)  # greedy: all 400 tokens ("second job": 271)
    wait_for(
        lambda: tree.job(second["id"]).json()["status"] == "in_progress",
        "a dispatch",
        tree.alive(),
    )
    # Killed once the executor has the attempt (its heartbeat counts it): a router killed between
    # writing the attempt down and sending it leaves no record to supersede.
    wait_for(lambda: _executor_busy(tree), "the attempt at the executor", tree.alive())
    tree.kill("router-1")
    time.sleep(1.0)  # the executor answers an absent router
    tree.start_queued_router()
    tree.healthy(1)
    finished = tree.finished(second["id"])
    assert finished["status"] == "completed", finished

    answers = [tree.job(job["id"]).json()["result"]["request_id"] for job in (first, second)]
    tree.stop_and_drain(live_server.url)
    billed = _billed(tree.contract.code)
    assert sorted(billed) == sorted(answers)  # each job billed once, by the record of its answer
    # The second job ran twice: the attempt whose router died (the executor saw its client go and
    # cancelled it, or finished it unheard) is superseded by the second dispatch, so it is never billed.
    records = {r: status for r, status, *_ in _records(tree.contract.code)}
    now = datetime.now(UTC)
    superseded = {
        a.record_id for a in superseded_attempts([tree.contract.code], now - timedelta(days=1), now)
    }
    assert len(records) == 3 and len(superseded & set(records)) == 1, (records, superseded)
    [lost] = superseded & set(records)
    assert records[lost] in ("ok", "cancelled")


def _executor_busy(tree: JobsTree) -> bool:
    listed = httpx.get(tree.router_url + "/tree/executors", timeout=5).json()["executors"]
    return any(executor["outstanding"] > 0 for executor in listed)


def test_the_batch_api_through_the_openai_sdk(
    jobs_tree: JobsTree, tiny_model: Path, live_server: Any
) -> None:
    tree = jobs_tree
    tree.start_queued_router()
    tree.start_executor("exec-a", tiny_model)
    tree.healthy(1)
    tree.start_worker("worker-1")
    client = openai.OpenAI(api_key=tree.api_key, base_url=tree.router_url + "/v1")
    lines = [
        {"custom_id": f"req-{k}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        for k, body in enumerate(
            [
                {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
                {"model": "tiny", "messages": [{"role": "user", "content": "clause"}], "max_tokens": 8},
                {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8},
            ]
        )
    ]
    upload = client.files.create(
        file=("input.jsonl", "".join(json.dumps(line) + "\n" for line in lines).encode()), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.request_counts is not None and batch.request_counts.total == 3

    def completed() -> bool:
        return client.batches.retrieve(batch.id).status == "completed"

    wait_for(completed, "the batch", tree.alive())
    done = client.batches.retrieve(batch.id)
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 1)
    assert done.output_file_id and done.error_file_id
    output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    errors = [json.loads(line) for line in client.files.content(done.error_file_id).text.splitlines()]
    assert [line["custom_id"] for line in output] == ["req-0", "req-1"]
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert output[0]["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
    assert [(line["custom_id"], line["error"]["code"]) for line in errors] == [("req-2", "model_not_found")]
    with pytest.raises(openai.BadRequestError) as not_input:  # a result file is no batch's input
        client.batches.create(
            input_file_id=done.output_file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert not_input.value.code == "invalid_batch_input"

    stranger = openai.OpenAI(api_key=tree.stranger_key, base_url=tree.router_url + "/v1")
    with pytest.raises(openai.NotFoundError):
        stranger.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        stranger.files.content(done.output_file_id)

    tree.stop_and_drain(live_server.url)
    billed = set(_billed(tree.contract.code))
    assert billed == {line["response"]["request_id"] for line in output}  # the refused line is not billed
