"""Helpers for the finance tests: staff and customer clients, and downloads parsed back into rows."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.test import Client

from accounts.models import Role, Tenant
from finance.tables import Column, Table
from tests.factories import MembershipFactory, UserFactory


def staff_client() -> Client:
    client = Client()
    client.force_login(UserFactory.create(username="finance-staff", is_staff=True))
    return client


def owner_client(tenant: Tenant) -> Client:
    client = Client()
    client.force_login(MembershipFactory.create(tenant=tenant, role=Role.OWNER).user)
    return client


def csv_rows(client: Client, url: str) -> list[dict[str, str]]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.content.decode("utf-8"), newline="")))


def parquet_table(client: Client, url: str) -> pa.Table:
    response = client.get(url)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/vnd.apache.parquet"
    return pq.read_table(io.BytesIO(response.content))


def as_text(value: Any, column: Column) -> str:
    """A value as the CSV writes it: decimals at their column's scale (money 2, quantities 6)."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value.quantize(Decimal(1).scaleb(-column.scale)), "f")
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def shown_as_csv(table: Table) -> list[dict[str, str]]:
    return [{c.key: as_text(row.get(c.key), c) for c in table.columns} for row in table.rows]


def floats(table: Table) -> list[Any]:
    """Every float among a table's cells (there must be none: money and quantities are Decimal)."""
    return [v for row in table.rows for v in row.values() if isinstance(v, float)]


def page_rows(client: Client, url: str, table: str) -> int:
    """How many data rows the page's table shows (by its data-testid)."""
    response = client.get(url)
    assert response.status_code == 200, response.content
    html = response.content.decode()
    assert f'data-testid="{table}-table"' in html
    return html.count(f'data-testid="{table}-row"')
