"""Which ledger checkpoint a report's records are in, so a customer can check them with the verifier
(`ledger.selectors.covering_checkpoint`), as the report stores it."""

from __future__ import annotations

import base64
from datetime import datetime

from contracts.models import Contract
from ledger.selectors import covering_checkpoint as covering
from treemeter_records.timeutil import unix_nanos


def covering_checkpoint(contract: Contract, start: datetime, end: datetime) -> str:
    """'<size> <base64 root hash>' of that checkpoint; '' while none is published or there is no record."""
    checkpoint = covering(contract.tenant.code, contract.code, unix_nanos(start), unix_nanos(end))
    if checkpoint is None:
        return ""
    return f"{checkpoint.size} {base64.b64encode(bytes(checkpoint.root_hash)).decode()}"
