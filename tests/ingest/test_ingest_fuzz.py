"""Hypothesis mutates valid signed batches and posts them: never a 5xx, nothing stored from a refused
batch, and both stores and the log agree after every answer."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.models import IngestBatch
from ledger.models import LogLeaf
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import any_line, assert_stores_agree, post, signed, stored_ids
from treemeter_records import RECORD_FIELDS, canonical_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

ODD_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=80) | st.sampled_from(
    ["", "\x00", "a" * 300, "é\x1b", "0" * 37]
)
ODD_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | ODD_TEXT
    | st.sampled_from([-1, 0, 2**31, 2**32, 2**63, 2**64]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(ODD_TEXT, children, max_size=3),
    max_leaves=6,
)
MUTATIONS = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("drop_line"), st.integers(0, 10)),
    st.tuples(st.just("field"), st.integers(0, 10), st.sampled_from([*RECORD_FIELDS, "extra"]), ODD_VALUES),
    st.tuples(st.just("deep_outcome"), st.integers(0, 10), st.sampled_from([31, 32, 33, 300, 3000, 100_000])),
    st.tuples(st.just("reseq"), st.integers(1, 5)),
    st.tuples(st.just("replay"), st.integers(0, 10)),
    st.tuples(
        st.just("valid"),
    ),
)


class Fuzzer:
    def __init__(self) -> None:
        self.contract = ContractFactory.create()
        self.agent: SigningAgent = signing_agent(self.contract)
        self.client = Client()
        self.sent: list[tuple[bytes, list[dict[str, Any]]]] = []

    def batch(self, count: int) -> tuple[bytes, list[dict[str, Any]]]:
        records = [self.agent.record(self.contract) for _ in range(count)]
        return self.agent.batch(records).body(), records

    def mutated(self, mutation: tuple[Any, ...], count: int) -> bytes:
        kind = mutation[0]
        body, records = self.batch(count)
        if kind == "byte":
            position = mutation[1] % len(body)
            return body[:position] + bytes([mutation[2]]) + body[position + 1 :]
        if kind == "truncate":
            return body[: mutation[1] % len(body)]
        if kind == "drop_line":
            lines = body.split(b"\n")
            del lines[1 + mutation[1] % count]
            return b"\n".join(lines)
        if kind == "field":
            record = records[mutation[1] % count]
            record[mutation[2]] = mutation[3]
            return signed(self.agent, records, [any_line(r) for r in records])
        if kind == "deep_outcome":  # written as bytes: no encoder nests 100,000 deep
            index = mutation[1] % count
            records[index]["outcome"] = "deep"
            lines = [canonical_bytes(r) for r in records]
            depth = mutation[2]
            lines[index] = lines[index].replace(
                b'"outcome":"deep"', b'"outcome":' + b'{"a":' * depth + b"1" + b"}" * depth
            )
            return signed(self.agent, records, lines)
        if kind == "reseq" and self.sent:
            old = self.sent[-1][1]
            copies = [{**r, "seq": self.agent.record(self.contract)["seq"]} for r in old[: mutation[1]]]
            return self.agent.batch(copies).body()
        if kind == "replay" and self.sent:
            return self.sent[mutation[1] % len(self.sent)][0]
        self.sent.append((body, records))
        return body


@pytest.fixture
def fuzzer() -> Fuzzer:
    return Fuzzer()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=MUTATIONS, count=st.integers(1, 4))
def test_mutated_batches_never_fail_the_server_nor_split_the_stores(
    fuzzer: Fuzzer, mutation: tuple[Any, ...], count: int
) -> None:
    body = fuzzer.mutated(mutation, count)
    before = (IngestBatch.objects.count(), LogLeaf.objects.count(), len(stored_ids()))
    response = post(fuzzer.client, body)
    assert response.status_code < 500, (mutation, response.content)
    answer = response.json()
    if response.status_code >= 400:
        assert isinstance(answer["code"], str) and isinstance(answer["message"], str)
        assert (LogLeaf.objects.count(), len(stored_ids())) == before[1:], "a refused batch stored records"
        if response.status_code != 422:  # 422: every record rejected, the answer itself is kept
            assert IngestBatch.objects.count() == before[0]
    assert_stores_agree()
