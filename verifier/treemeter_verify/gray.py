"""Gray usage (docs/releases.md): the records a package made while a gray-release stage with billing
off was in force are metered but not billed. The export states those stages (`invoice.gray_release`:
package and [starts_ns, ends_ns)); the verifier finds their records itself and leaves them out of the
re-rated lines, as the platform's rating does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from . import rating
from .records import load_record


def gray_records(
    invoice: dict[str, Any], lines: Iterable[bytes], superseded: set[str]
) -> tuple[set[str], list[int]]:
    """The ids of the invoice's successful records inside a stated gray window (not superseded by a
    retry, which leaves them out already), and their usage summed per dimension."""
    windows: Sequence[dict[str, Any]] = invoice.get("gray_release") or ()
    found: set[str] = set()
    usage = [0] * len(rating.DIMENSIONS)
    if not windows:
        return found, usage
    owner = (invoice["tenant"], invoice["contract"])
    for line in lines:
        record = load_record(line)
        if not isinstance(record, dict) or record.get("status") != "ok":
            continue
        record_id, start = str(record.get("record_id")), record.get("start_ns")
        if (record.get("tenant"), record.get("contract")) != owner or type(start) is not int:
            continue
        if record_id in superseded or record_id in found:
            continue
        if any(
            w["package"] == record.get("package") and w["starts_ns"] <= start < w["ends_ns"] for w in windows
        ):
            found.add(record_id)
            usage = [total + part for total, part in zip(usage, rating.usage_of(record), strict=True)]
    return found, usage
