"""Who an invoice is from and to, and when it is due: pinned into the invoice when it is finalised, so the
document keeps the legal details it was issued with (a later address change does not rewrite it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from accounts.models import Tenant
from contracts.models import Contract

from .models import Issuer


def issuers(codes: Iterable[str]) -> dict[str, Issuer]:
    """The issuers of these `issuing_entity` codes, in one query (an unknown code has none)."""
    return {i.code: i for i in Issuer.objects.filter(code__in=set(codes))}


BUYER_DETAILS = ("legal_name", "tax_id", "address", "bank_name", "bank_account")
BUYER_DETAIL_NAMES: dict[str, Promise] = {
    "legal_name": _("legal name"),
    "tax_id": _("taxpayer ID"),
    "address": _("address"),
    "bank_name": _("bank"),
    "bank_account": _("bank account"),
}


def buyer_details(tenant: Tenant) -> dict[str, Any]:
    """What an issuer that requires the buyer's details prints: the bank details, and which of the
    required details the tenant has not given (`missing`, shown on the invoice, never left out silently)."""
    given = {"legal_name": tenant.legal_name, "tax_id": tenant.tax_id, "address": tenant.address}
    given |= {"bank_name": tenant.bank_name, "bank_account": tenant.bank_account}
    return {
        "bank_name": tenant.bank_name,
        "bank_account": tenant.bank_account,
        "missing": [name for name in BUYER_DETAILS if not given[name]],
    }


def invoice_parties(contract: Contract, known: Mapping[str, Issuer], issued_at: datetime) -> dict[str, Any]:
    """The issuer and the buyer with their legal details, the issue date and the due date (issue date
    plus the contract's payment terms), as the invoice's terms keep them."""
    issuer = known.get(contract.issuing_entity)
    tenant = contract.tenant
    return {
        "issuer": {
            "code": contract.issuing_entity,
            "legal_name": issuer.legal_name if issuer else contract.issuing_entity,
            "address": issuer.address if issuer else "",
            "tax_id": issuer.tax_id if issuer else "",
        },
        "buyer": {
            "code": tenant.code,
            "legal_name": tenant.legal_name or tenant.name,
            "address": tenant.address,
            "tax_id": tenant.tax_id,
            **(buyer_details(tenant) if issuer is not None and issuer.requires_buyer_details else {}),
        },
        "issued_on": issued_at.date().isoformat(),
        "payment_terms_days": contract.payment_terms_days,
        "due_on": (issued_at + timedelta(days=contract.payment_terms_days)).date().isoformat(),
    }
