"""What ingest announces to the layers above it (they subscribe; ingest imports none of them).

``records_stored``: committed records reached ClickHouse (one outbox row stored), sent with
``tenants``, the tenants whose usage they change. Sent after the row's transaction; receivers must not
fail the store (the records are stored either way), e.g. the usage answer cache (usage.apps).
"""

from __future__ import annotations

from django.dispatch import Signal

records_stored = Signal()
