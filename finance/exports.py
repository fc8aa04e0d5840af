"""A `finance.tables.Table` as a download: one function per format, both from the same rows.

CSV: UTF-8, a header of the columns' stable keys, decimals in plain notation (never exponent or
float), timestamps ISO 8601 in UTC, empty cells for missing values. Parquet: typed columns (decimal128
with the column's scale, int64, timestamp[us, UTC], string), so nothing passes through float.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .tables import Column, Table


def _text(column: Column, value: Any) -> str:
    if value is None:
        return ""
    if column.kind == "decimal":
        return format(_scaled(column, value), "f")
    if column.kind == "timestamp":
        return _utc(value).isoformat()
    return str(value)


def _scaled(column: Column, value: Decimal) -> Decimal:
    """The value at the column's scale; a value that does not fit exactly is a bug, not a rounding."""
    scaled = value.quantize(Decimal(1).scaleb(-column.scale))
    if scaled != value:
        raise ValueError(f"{column.key}: {value} does not fit {column.scale} decimal places")
    return scaled


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return value.astimezone(UTC)


def to_csv(table: Table) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([c.key for c in table.columns])
    for row in table.rows:
        writer.writerow([_text(c, row.get(c.key)) for c in table.columns])
    return out.getvalue().encode("utf-8")


def _arrow_type(column: Column) -> pa.DataType:
    if column.kind == "decimal":
        return pa.decimal128(column.precision, column.scale)
    if column.kind == "integer":
        return pa.int64()
    if column.kind == "timestamp":
        return pa.timestamp("us", tz="UTC")
    return pa.string()


def _arrow_value(column: Column, value: Any) -> Any:
    if value is None:
        return None
    if column.kind == "decimal":
        return _scaled(column, value)
    if column.kind == "timestamp":
        return _utc(value)
    if column.kind == "text":
        return str(value)
    return value


def arrow_table(table: Table) -> pa.Table:
    schema = pa.schema([pa.field(c.key, _arrow_type(c)) for c in table.columns])
    arrays = [
        pa.array([_arrow_value(c, row.get(c.key)) for row in table.rows], type=_arrow_type(c))
        for c in table.columns
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def to_parquet(table: Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(arrow_table(table), sink)
    return sink.getvalue()


FORMATS = {
    "csv": (to_csv, "text/csv; charset=utf-8"),
    "parquet": (to_parquet, "application/vnd.apache.parquet"),
}
