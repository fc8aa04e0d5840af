"""A report as plain data: typed columns and rows. The page, the CSV and the Parquet file are all
rendered from the same `Table`, so a download is exactly the table shown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.utils.functional import Promise

Kind = Literal["text", "integer", "decimal", "timestamp"]


@dataclass(frozen=True)
class Column:
    """One column: `key` is its stable machine name (CSV header, Parquet field), `label` what people read.

    Decimal columns carry a fixed scale (money 2, quantities 6, ratios 4): Parquet stores them as
    decimal128(precision, scale); money always sits next to a `currency` text column."""

    key: str
    label: str | Promise
    kind: Kind = "text"
    scale: int = 0
    precision: int = 38
    labels: Mapping[str, str | Promise] = field(default_factory=dict)  # display names of code values
    percent: bool = False  # a ratio shown as a percentage on the page (exports keep the ratio)
    link: str = ""  # on the page, a link to this URL name with the row's id (exports keep the value)


def money(key: str, label: str | Promise) -> Column:
    return Column(key, label, "decimal", scale=2, precision=20)


def quantity(key: str, label: str | Promise) -> Column:
    return Column(key, label, "decimal", scale=6, precision=24)


def ratio(key: str, label: str | Promise) -> Column:
    return Column(key, label, "decimal", scale=4, precision=10, percent=True)


@dataclass(frozen=True)
class Table:
    """`name` names the download (`<name>.csv`) and the page's data-testid (`<name>-table`)."""

    name: str
    columns: Sequence[Column]
    rows: Sequence[Mapping[str, Any]]

    def cells(self) -> list[tuple[Mapping[str, Any], list[tuple[Column, Any]]]]:
        """Each row with its (column, value) pairs in column order, for templates."""
        return [(row, [(c, row.get(c.key)) for c in self.columns]) for row in self.rows]
