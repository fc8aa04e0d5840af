"""The outbox between the two stores: committed batches' accepted lines, inserted into ClickHouse.

Kept apart from ingest.services (which decides what is accepted) so that every reader that bills or
proves (invoices, SLA reports, exports, the store audit) can call `store_pending` first without
depending on the ingest decision's own imports.
"""

from __future__ import annotations

from collections.abc import Iterable

from clickhouse_connect.driver.exceptions import ClickHouseError
from django.db import DatabaseError, transaction

from clickhouse_store import query

from .events import records_stored
from .models import PendingInsert

RECORDS_TABLE = "usage_records"


class StoreUnavailable(Exception):
    """Committed records could not be inserted into ClickHouse yet; they stay in the outbox."""


def store_pending(only: Iterable[int] | None = None) -> int:
    """Insert committed outbox rows into ClickHouse, oldest first, and delete them; returns how many.

    Safe to repeat and to run concurrently: each row is locked while it is stored (a concurrent call
    waits for it, then finds it gone), and the insert carries the row's deduplication token, so an
    insert that reached ClickHouse before a failure here is dropped by the engine when repeated.
    Raises StoreUnavailable when ClickHouse (or PostgreSQL) fails; what was stored by then stays stored.
    Each stored row is announced (`ingest.events.records_stored`, with its tenants).
    """
    rows = PendingInsert.objects.order_by("pk")
    if only is not None:
        rows = rows.filter(pk__in=list(only))
    stored = 0
    try:
        for pk in list(rows.values_list("pk", flat=True)):
            with transaction.atomic():
                row = PendingInsert.objects.select_for_update().filter(pk=pk).first()
                if row is None:
                    continue
                query.insert_json_lines(RECORDS_TABLE, bytes(row.lines), dedup_token=row.dedup_token)
                row.delete()
            records_stored.send(sender=PendingInsert, tenants=list(row.tenants))
            stored += 1
    except (ClickHouseError, DatabaseError) as error:
        raise StoreUnavailable(f"stored {stored} batches, then: {error}") from None
    return stored
