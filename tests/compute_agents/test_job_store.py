"""The router's job table and signed callbacks: what survives a restart, what is kept encrypted and
wiped, what a finished job never changes, and which callbacks verify."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compute_agents.jobs.batches import BatchInputError, parse_batch_input
from compute_agents.jobs.callbacks import (
    SIGNATURE_HEADER,
    CallbackRefused,
    check_callback_url,
    sign_callback,
    verify_callback,
)
from compute_agents.jobs.queue import job_token, token_valid
from compute_agents.jobs.store import JobStore
from treemeter_records import new_record_id, private_key_from_seed

KEY = private_key_from_seed(bytes(range(32)))
SECRET = "Bearer tmk_the-customers-secret"


def _store(path: Path) -> JobStore:
    return JobStore(path / "jobs.sqlite3", KEY)


def _add(store: JobStore) -> str:
    job_id = new_record_id()
    decision = {"domain": None, "confidence": None, "path": ["L1", "L3", "L1"], "subtree": "default"}
    store.add(
        job_id,
        tenant="acme",
        contract="c-1",
        route="/v1/completions",
        body=b'{"model":"tiny","prompt":"x"}',
        authorization=SECRET,
        decision={**decision, "l2_confirmation": False, "model": "tiny"},
        received_ns=1_800_000_000_000_000_000,
    )
    return job_id


def test_a_job_survives_a_restart_with_its_attempts_and_its_secret_sealed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _add(store)
    assert store.start_dispatch(job_id) == 1
    store.add_attempt(job_id, "attempt-1")
    store.close()
    assert SECRET.encode() not in (tmp_path / "jobs.sqlite3").read_bytes()  # encrypted at rest

    again = _store(tmp_path)
    job = again.get(job_id)
    assert job is not None and (job.state, job.dispatches, job.attempts) == ("running", 1, ("attempt-1",))
    assert again.credential(job_id) == SECRET
    assert again.start_dispatch(job_id) == 2
    assert JobStore(tmp_path / "jobs.sqlite3", private_key_from_seed(os.urandom(32))).get(job_id) is not None


def test_a_finished_job_keeps_its_first_answer_and_forgets_the_secret(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _add(store)
    store.finish(job_id, "succeeded", 200, "rec-1", b'{"ok":1}')
    store.finish(job_id, "failed", 503, "rec-2", b'{"ok":0}')  # a late second dispatch changes nothing
    job = store.get(job_id)
    assert job is not None
    assert (job.state, job.result_status, job.result_request_id) == ("succeeded", 200, "rec-1")
    assert job.as_api()["status"] == "completed" and job.as_api()["result"]["body"] == {"ok": 1}
    assert store.credential(job_id) is None
    with pytest.raises(ValueError, match="a job finishes as one of"):
        store.finish(job_id, "running", 200, "x", b"")


def test_callbacks_and_job_tokens_verify_only_as_signed() -> None:
    body = b'{"id":"job-1","status":"completed"}'
    headers = sign_callback(KEY, body, now_s=1_800_000_000)
    header = headers[SIGNATURE_HEADER]
    public = KEY.public_key()
    assert verify_callback(public, header, body, now_s=1_800_000_010)
    assert not verify_callback(public, header, body + b" ", now_s=1_800_000_010)  # altered body
    assert not verify_callback(public, header, body, now_s=1_800_000_000 + 301)  # replayed late
    assert not verify_callback(
        private_key_from_seed(os.urandom(32)).public_key(), header, body, now_s=1_800_000_000
    )
    assert not verify_callback(public, "t=1,ed25519=not-base64!", body, now_s=1)
    token = job_token(KEY, "job-1")
    assert token_valid(public, "job-1", token) and not token_valid(public, "job-2", token)
    assert not token_valid(public, "job-1", "garbage")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "no request"),
        (b"not json\n", "line 1: not a JSON object"),
        (b'{"method":"POST","url":"/v1/completions","body":{}}\n', "line 1: custom_id must be"),
        (
            b'{"custom_id":"a","method":"POST","url":"/v1/completions","body":{}}\n'
            b'{"custom_id":"a","method":"POST","url":"/v1/completions","body":{}}\n',
            "line 2: custom_id 'a' appears twice",
        ),
        (
            b'{"custom_id":"a","method":"POST","url":"/v1/embeddings","body":{}}\n',
            "line 1: each request must be",
        ),
        (
            b'{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"stream":true}}\n',
            "cannot stream",
        ),
    ],
)
def test_a_bad_batch_input_names_its_line(content: bytes, message: str) -> None:
    with pytest.raises(BatchInputError, match=message):
        parse_batch_input(content, "/v1/completions")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "http://127.0.0.1:9/x",
        "http://10.0.0.5/x",
        "http://[::1]/x",
        "http://localhost/x",
        "http://169.254.169.254/latest/meta-data",
    ],
)
def test_a_callback_into_the_network_is_refused(url: str) -> None:
    with pytest.raises(CallbackRefused):
        check_callback_url(url, allow_private=False, resolve=False)


def test_a_public_callback_or_an_allowed_private_one_passes() -> None:
    check_callback_url("https://hooks.example.com/jobs", allow_private=False, resolve=False)
    check_callback_url("http://127.0.0.1:9/x", allow_private=True, resolve=False)
    with pytest.raises(CallbackRefused, match="http"):
        check_callback_url("ftp://127.0.0.1/x", allow_private=True, resolve=False)
