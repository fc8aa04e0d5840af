"""`copy_insert`: rows written with COPY read back as bulk_create would have stored them."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from billing.models import Invoice, InvoiceLine
from common.pg_copy import copy_insert
from tests.factories import ContractFactory

pytestmark = pytest.mark.django_db

NOV, DEC = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)


def _invoice(contract_code: str = "", **fields: object) -> Invoice:
    contract = ContractFactory.create(**({"code": contract_code} if contract_code else {}))
    values = {"period_start": NOV, "period_end": DEC, "currency": "CNY", "record_count": 0, **fields}
    values.setdefault("total", Decimal("10.00"))
    return Invoice(contract=contract, tenant=contract.tenant, **values)


def test_rows_ids_and_state_match_what_bulk_create_gives() -> None:
    first = _invoice()
    first.save()
    invoices = [
        _invoice(status=Invoice.Status.FINALIZED, terms={"rate": "0.06", "quoted": 'a "b" \\ c\n中文'}),
        _invoice(number=None, subtotal=Decimal("9.43")),
    ]
    copy_insert(invoices)
    lines = [
        InvoiceLine(
            invoice=invoices[0],
            kind=InvoiceLine.Kind.BASE_FEE,
            description="Fee",
            quantity=Decimal(1),
            unit_price=Decimal("0.00001234"),
            amount=Decimal("10.00"),
            details={"share": "1"},
        ),
    ]
    copy_insert(lines)

    assert [i.pk for i in invoices] == sorted(i.pk for i in invoices) and invoices[0].pk > first.pk
    later = _invoice()
    later.save()
    assert later.pk > invoices[1].pk  # the sequence moved on: no id is handed out twice
    stored = Invoice.objects.get(pk=invoices[0].pk)
    assert stored.status == "finalized"  # the choice's value, not the Enum's name
    assert stored.terms == {"rate": "0.06", "quoted": 'a "b" \\ c\n中文'}
    assert stored.created_at is not None and stored.created_at.tzinfo is not None  # auto_now_add ran
    assert Invoice.objects.get(pk=invoices[1].pk).subtotal == Decimal("9.43")
    line = InvoiceLine.objects.get()
    assert (line.invoice_id, line.kind, line.unit_price, line.details) == (
        invoices[0].pk,
        "base_fee",
        Decimal("0.00001234"),
        {"share": "1"},
    )
    assert lines[0].invoice_id == invoices[0].pk and not lines[0]._state.adding
    invoices[1].total = Decimal("11.00")
    invoices[1].save()  # an update of the stored row, not a second insert
    assert Invoice.objects.filter(contract=invoices[1].contract).get().total == Decimal("11.00")


def test_a_constraint_violation_is_djangos_error_and_rolls_back() -> None:
    invoice = _invoice()
    invoice.save()
    twin = Invoice(
        contract=invoice.contract, tenant=invoice.tenant, period_start=NOV, period_end=DEC, total=0
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        copy_insert([_invoice(), twin])
    assert Invoice.objects.count() == 1


def test_one_model_at_a_time() -> None:
    invoice = _invoice()
    with pytest.raises(TypeError):
        copy_insert([invoice, InvoiceLine(invoice=invoice)])
