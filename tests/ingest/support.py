"""What every ingest integrity test checks: both stores and the log agree, record for record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.test import Client

from clickhouse_store import query
from ingest.audit import audit_window
from ingest.models import PendingInsert
from ledger.models import LogLeaf
from ledger.services import log_state
from tests.factories import SigningAgent
from treemeter_records import canonical_bytes, merkle_root_of, sign_header

URL = "/v1/ingest/batches"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FAR = datetime(2200, 1, 1, tzinfo=UTC)


def post(client: Client, body: bytes) -> Any:
    return client.post(URL, data=body, content_type="application/x-ndjson")


def stored_ids() -> list[str]:
    """Every row of usage_records, copies included (no FINAL): a copy would show twice."""
    return [row[0] for row in query.select("SELECT toString(record_id) FROM usage_records")]


def logged_ids() -> list[str]:
    return [str(record_id) for record_id in LogLeaf.objects.values_list("record_id", flat=True)]


def assert_stores_agree() -> int:
    """Every stored record is a leaf, every leaf a stored record, once each; nothing is left in the
    outbox; the log's size is its leaves; the store audit finds nothing. Returns the record count."""
    assert not PendingInsert.objects.exists()
    stored, logged = stored_ids(), logged_ids()
    assert len(stored) == len(set(stored)), "a record is stored twice"
    assert sorted(stored) == sorted(logged)
    assert log_state().size == len(logged)
    assert audit_window(EPOCH, FAR) == []
    return len(stored)


def signed(agent: SigningAgent, records: list[dict[str, Any]], lines: list[bytes] | None = None) -> bytes:
    """Sign records that build_batch would refuse (an agent with a bug or an attacker's key), or the
    raw `lines` given for them."""
    lines = lines or [canonical_bytes(r) for r in records]
    header = {
        "v": 1,
        "agent_id": agent.agent_id,
        "key_id": agent.key_row.key_id,
        "first_seq": records[0]["seq"],
        "last_seq": records[-1]["seq"],
        "count": len(lines),
        "merkle_root": merkle_root_of(lines).hex(),
        "created_ns": 1,
    }
    envelope = canonical_bytes({"header": header, "signature": sign_header(header, agent.key)})
    return b"\n".join([envelope, *lines])


def any_line(record: dict[str, Any]) -> bytes:
    """The canonical layout for any JSON value, floats and integers beyond 64 bits included
    (canonical_bytes refuses those, but an attacker's line may carry them)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# Real failures on the real code path, for failure-injection tests.
_FAIL_FUNCTION = (
    "CREATE OR REPLACE FUNCTION treemeter_injected_failure() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'injected failure on % %', TG_OP, TG_TABLE_NAME; END $$"
)


def _sql(*statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


@contextmanager
def table_away(table: str) -> Iterator[None]:
    """Reads of `table` fail (undefined table) while it is renamed."""
    _sql(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        yield
    finally:
        _sql(f"ALTER TABLE {table}_away RENAME TO {table}")


@contextmanager
def refused_write(table: str, operation: str) -> Iterator[None]:
    """Every row `operation` (INSERT, UPDATE, DELETE) on `table` raises, COPY included."""
    _sql(
        _FAIL_FUNCTION,
        f"CREATE TRIGGER injected BEFORE {operation} ON {table} "
        "FOR EACH ROW EXECUTE FUNCTION treemeter_injected_failure()",
    )
    try:
        yield
    finally:
        _sql(f"DROP TRIGGER injected ON {table}")


@contextmanager
def refused_commit() -> Iterator[None]:
    """The transaction that wrote an outbox row fails at COMMIT (a deferred constraint trigger)."""
    _sql(
        _FAIL_FUNCTION,
        "CREATE CONSTRAINT TRIGGER injected AFTER INSERT ON ingest_pendinginsert "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION treemeter_injected_failure()",
    )
    try:
        yield
    finally:
        _sql("DROP TRIGGER injected ON ingest_pendinginsert")


@contextmanager
def refused_store_insert() -> Iterator[None]:
    """ClickHouse refuses every insert into usage_records (VIOLATED_CONSTRAINT)."""
    query.command("ALTER TABLE usage_records ADD CONSTRAINT injected CHECK tokens_in < 0")
    try:
        yield
    finally:
        query.command("ALTER TABLE usage_records DROP CONSTRAINT injected")
