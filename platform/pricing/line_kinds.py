"""Invoice line kinds: the one list the invoice line's choices, rating and the contract term
`credit_order` read."""

from __future__ import annotations

from django.db import models


class LineKind(models.TextChoices):
    USAGE = "usage", "Usage"
    BASE_FEE = "base_fee", "Base fee"
    COMMITMENT = "commitment", "Minimum commitment true-up"
    ADJUSTMENT = "adjustment", "Late usage adjustment"
    DISCOUNT = "discount", "Discount"
    SERVICE_CREDIT = "service_credit", "SLA service credit"


# The kinds prepaid credits may be told to pay (`Contract.credit_order`): an SLA service credit is a
# credit itself, never paid by one.
CREDITABLE_KINDS: tuple[str, ...] = tuple(kind for kind in LineKind.values if kind != LineKind.SERVICE_CREDIT)
