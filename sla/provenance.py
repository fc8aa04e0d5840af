"""Which ledger checkpoint a report's records are in, so a customer can check them with the verifier.

The ledger appends every accepted record as a leaf (ledger.LogLeaf, indexed by position); a signed
checkpoint of size n covers leaves 0 … n−1. A report's data is covered by the first checkpoint whose
size exceeds the highest leaf index among the contract's records in the window.
"""

from __future__ import annotations

import base64
from datetime import datetime

from django.db.models import Max

from contracts.models import Contract
from ledger.models import Checkpoint, LogLeaf
from treemeter_records.timeutil import unix_nanos


def covering_checkpoint(contract: Contract, start: datetime, end: datetime) -> str:
    """'<size> <base64 root hash>' of that checkpoint; '' while none is published or there is no record."""
    last = LogLeaf.objects.filter(
        tenant=contract.tenant.code,
        contract=contract.code,
        start_ns__gte=unix_nanos(start),
        start_ns__lt=unix_nanos(end),
    ).aggregate(last=Max("index"))["last"]
    if last is None:
        return ""
    checkpoint = Checkpoint.objects.filter(size__gt=last).order_by("size", "id").first()
    if checkpoint is None:
        return ""
    return f"{checkpoint.size} {base64.b64encode(bytes(checkpoint.root_hash)).decode()}"
