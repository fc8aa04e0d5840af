"""The outbox between the two stores: committed batches' accepted lines, inserted into ClickHouse.

Kept apart from ingest.services (which decides what is accepted) so that every reader that bills or
proves (invoices, SLA reports, exports, the store audit) can call `store_pending` first without
depending on the ingest decision's own imports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from django.db import DatabaseError, transaction

from clickhouse_store.errors import StoreError
from clickhouse_store.queries.records import insert_record_lines

from .events import records_stored
from .models import PendingInsert


class StoreUnavailable(Exception):
    """Committed records could not be inserted into ClickHouse yet; they stay in the outbox."""


@dataclass(frozen=True)
class Committed:
    """An outbox row just committed by ingest, with what it holds (no need to read it back)."""

    pk: int
    lines: bytes
    dedup_token: str
    tenants: list[str]
    sandbox_lines: bytes = b""  # sandbox contracts' lines, for sandbox_records


def store_pending(only: Iterable[Committed] | None = None) -> int:
    """Insert committed outbox rows into ClickHouse, oldest first, and delete them; returns how many.
    `only`: the rows ingest just committed (their lines in hand); else every row in the outbox.

    Safe to repeat and to run concurrently: each row is locked while it is stored (a concurrent call
    waits for it, then finds it gone), and the insert carries the row's deduplication token, so an
    insert that reached ClickHouse before a failure here is dropped by the engine when repeated.
    Raises StoreUnavailable when ClickHouse (or PostgreSQL) fails; what was stored by then stays stored.
    Each stored row is announced (`ingest.events.records_stored`, with its tenants).
    """
    stored = 0
    try:
        if only is not None:
            for row in only:
                stored += _store(row.pk, partial(_given, row))
        else:
            for pk in list(PendingInsert.objects.order_by("pk").values_list("pk", flat=True)):
                stored += _store(pk, partial(_read, pk))
    except (StoreError, DatabaseError) as error:
        raise StoreUnavailable(f"stored {stored} batches, then: {error}") from None
    return stored


def _given(row: Committed) -> Committed:
    return row


def _read(pk: int) -> Committed:
    row = PendingInsert.objects.get(pk=pk)
    return Committed(row.pk, bytes(row.lines), row.dedup_token, list(row.tenants), bytes(row.sandbox_lines))


def _store(pk: int, contents: Callable[[], Committed]) -> int:
    """Store one row under its lock; 0 when another call stored it first."""
    with transaction.atomic():
        if not PendingInsert.objects.select_for_update().filter(pk=pk).values_list("pk", flat=True):
            return 0
        row = contents()
        insert_record_lines(row.lines, row.dedup_token)
        insert_record_lines(row.sandbox_lines, row.dedup_token, sandbox=True)
        PendingInsert.objects.filter(pk=pk).delete()
    records_stored.send(sender=PendingInsert, tenants=row.tenants)
    return 1
