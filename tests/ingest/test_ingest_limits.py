"""Every column that stores record or batch input is at least as wide as the format lets that input be,
and a value one past the format's limit is a per-record rejection with a code, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.db import models
from django.test import Client

from ingest.models import RejectedRecord
from tests.factories import ContractFactory, SigningAgent, signing_agent
from tests.ingest.support import any_line, assert_stores_agree, post, signed
from treemeter_records.limits import FIELD_PATH_MAX, RECORD_ID_LENGTH, SLUG_MAX

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

# Every text column of the ingest and ledger models (and of the dispute models billing took over from
# the ledger, which hold record fields too), with what writes it: the record or header field
# whose value it stores (and the format's limit on that value), or why no input reaches it unchecked.
RECORD_INPUT = {
    ("ledger", "LogLeaf", "tenant"): ("tenant", SLUG_MAX),
    ("ledger", "LogLeaf", "contract"): ("contract", SLUG_MAX),
    ("billing", "BillingExclusion", "tenant"): ("tenant", SLUG_MAX),
    ("billing", "BillingExclusion", "contract"): ("contract", SLUG_MAX),
    ("ingest", "RejectedRecord", "record_id"): ("record_id", RECORD_ID_LENGTH),
}
NOT_RECORD_INPUT = {
    ("ingest", "IngestBatch", "header_digest"): "SHA-256 hex computed by ingest",
    ("ingest", "IngestBatch", "key_id"): "a registered key's id (the header's key_id is looked up first)",
    ("ingest", "IngestBatch", "merkle_root"): "checked against 64 hex characters before the transaction",
    ("ingest", "RejectedRecord", "code"): "one of our codes",
    ("ingest", "RejectedRecord", "field"): "cut to FIELD_PATH_MAX by ingest.rejections",
    ("ingest", "RejectedRecord", "message"): "text, escaped and cut by ingest.rejections",
    ("ingest", "PendingInsert", "dedup_token"): "SHA-256 hex computed by ingest",
    ("ledger", "LogBatch", "body_sha256"): "SHA-256 hex computed by ingest",
    ("ledger", "Checkpoint", "reason"): "a choice",
    ("ledger", "Checkpoint", "note"): "signed by the platform",
    ("ledger", "LedgerEvent", "kind"): "a choice",
    ("billing", "Dispute", "status"): "a choice",
    ("billing", "Dispute", "reason"): "REST input (tests/api)",
    ("billing", "DisputeEvent", "action"): "one of our actions",
}


DISPUTE_MODELS = ("Dispute", "DisputeEvent", "BillingExclusion")


def text_columns(app: str, only: tuple[str, ...] | None = None) -> set[tuple[str, str, str]]:
    return {
        (app, model.__name__, field.name)
        for model in apps.get_app_config(app).get_models()
        if only is None or model.__name__ in only
        for field in model._meta.get_fields()
        if isinstance(field, models.CharField | models.TextField)
    }


def test_every_text_column_is_classified() -> None:
    """A new column must say here what writes it, so no record input lands in a narrower column."""
    columns = text_columns("ingest") | text_columns("ledger") | text_columns("billing", DISPUTE_MODELS)
    assert columns == set(RECORD_INPUT) | set(NOT_RECORD_INPUT)


@pytest.mark.parametrize("column", sorted(RECORD_INPUT))
def test_columns_are_as_wide_as_the_format_allows(column: tuple[str, str, str]) -> None:
    app, model, name = column
    field = apps.get_model(app, model)._meta.get_field(name)
    assert isinstance(field, models.CharField) and field.max_length is not None
    assert field.max_length >= RECORD_INPUT[column][1]


@pytest.fixture
def contract() -> Any:
    return ContractFactory.create()


@pytest.fixture
def agent(contract: Any) -> SigningAgent:
    return signing_agent(contract)


@pytest.mark.parametrize("name", sorted({field for field, _ in RECORD_INPUT.values()}))
def test_one_past_the_limit_is_a_rejection_with_a_code(
    client: Client, contract: Any, agent: SigningAgent, name: str
) -> None:
    limit = dict(RECORD_INPUT.values())[name]
    record = agent.record(contract)
    record[name] = "a" * (limit + 1)
    response = post(client, signed(agent, [record, agent.record(contract)]))
    assert response.status_code == 200, response.content
    [rejection] = response.json()["rejections"]
    assert rejection["code"] == "invalid_value"
    assert RejectedRecord.objects.get().field == name
    assert assert_stores_agree() == 1


def test_a_field_path_longer_than_its_column_is_cut(
    client: Client, contract: Any, agent: SigningAgent
) -> None:
    record = agent.record(contract)
    record["outcome"] = {"x" * (FIELD_PATH_MAX + 50): 1.5}  # a float: wrong_type, at that path
    records = [record, agent.record(contract)]
    post(client, signed(agent, records, [any_line(r) for r in records]))
    kept = RejectedRecord.objects.get().field
    assert len(kept) == FIELD_PATH_MAX and kept.endswith("…")
