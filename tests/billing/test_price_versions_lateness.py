"""Late records in a period whose price changed: one adjustment line per dimension, priced on the
usage per price segment before and after the late records. Real records through ingest, real
ClickHouse and PostgreSQL, the clock pinned by passing `now`; amounts computed by hand in comments."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from billing.models import Invoice, LateUsage
from billing.services import generate_invoice
from common.periods import month_bounds
from contracts.models import Contract, ContractPrice
from tests.billing.usage import at, send
from tests.factories import ContractFactory

pytestmark = [pytest.mark.usefixtures("clickhouse"), pytest.mark.django_db]
D = Decimal
NOV, DEC, JAN = month_bounds("2026-11"), month_bounds("2026-12"), month_bounds("2027-01")
DEC_2, JAN_2, FEB_2 = (datetime(y, m, 2, tzinfo=UTC) for y, m in ((2026, 12), (2027, 1), (2027, 2)))
CHANGE = datetime(2026, 11, 15, tzinfo=UTC)


def price(c: Contract, dimension: str, **fields: Any) -> None:
    ContractPrice.objects.create(contract=c, dimension=dimension, charge_model="per_unit", **fields)


def adjustments(invoice: Invoice) -> list[tuple[str, Decimal, Decimal, Decimal]]:
    return [
        (x.dimension, x.quantity, x.unit_price, x.amount) for x in invoice.lines.filter(kind="adjustment")
    ]


def test_late_usage_across_a_price_change_is_one_exact_line_per_dimension() -> None:
    c = ContractFactory.create()
    price(c, "requests", unit_price=D("0.01"))
    price(c, "tokens_out", unit_price=D("0.00003"))
    price(c, "tokens_out", unit_price=D("0.00002"), effective_from=CHANGE)
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    send(c, 10, at(2026, 11, 20), tokens_out=100_000)
    november = generate_invoice(c.pk, *NOV, now=DEC_2)
    assert november.status == "finalized" and november.total == D("50.20")  # 0.20 + 30.00 + 20.00

    send(c, 2, at(2026, 11, 3), tokens_out=100_000)  # late, before the change: 200,000 at 0.00003
    send(c, 3, at(2026, 11, 20), tokens_out=100_000)  # late, after it: 300,000 at 0.00002
    december = generate_invoice(c.pk, *DEC, now=JAN_2)

    assert adjustments(december) == [
        ("requests", D(5), D("0.01"), D("0.05")),  # 5 × 0.01
        # 200,000 × 0.00003 + 300,000 × 0.00002 = 6.00 + 6.00 = 12.00; 12.00 / 500,000 = 0.000024
        ("tokens_out", D(500_000), D("0.000024"), D("12.00")),
    ]
    assert december.lines.get(dimension="tokens_out", kind="adjustment").details["segments"] == [
        "200000",
        "300000",
    ]
    assert list(LateUsage.objects.values_list("dimension", "quantity", "amount", "billed_on")) == [
        ("requests", D(5), D("0.05"), december.pk),
        ("tokens_out", D(500_000), D("12.00"), december.pk),
    ]
    january = generate_invoice(c.pk, *JAN, now=FEB_2)
    assert adjustments(january) == []  # billed once, segment by segment


def test_late_usage_takes_the_allowance_in_time_order() -> None:
    c = ContractFactory.create()
    price(c, "tokens_out", unit_price=D("0.00003"), included_quantity=D(500_000))
    price(c, "tokens_out", unit_price=D("0.00002"), included_quantity=D(1_500_000), effective_from=CHANGE)
    send(c, 10, at(2026, 11, 3), tokens_out=100_000)
    send(c, 10, at(2026, 11, 20), tokens_out=100_000)
    # Billed: the newest allowance 1,500,000 covers the first 1,000,000 and 500,000 of the second
    # segment; 500,000 × 0.00002 = 10.00.
    assert generate_invoice(c.pk, *NOV, now=DEC_2).total == D("10.00")

    send(c, 2, at(2026, 11, 3), tokens_out=100_000)  # late, before the change
    december = generate_invoice(c.pk, *DEC, now=JAN_2)

    # Now the first segment's 1,200,000 are free and only 300,000 of the second: 700,000 × 0.00002 =
    # 14.00, so the 200,000 late tokens cost 14.00 − 10.00 = 4.00 (they used up allowance the later
    # usage had), 0.00002 per token.
    assert adjustments(december) == [("tokens_out", D(200_000), D("0.00002"), D("4.00"))]
