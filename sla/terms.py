"""Which SLA terms govern a contract, and the credit ladder arithmetic (exact, no floats)."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction

from contracts.models import Contract

from .models import CreditStep, SlaPolicy


def policy_for(contract: Contract) -> SlaPolicy | None:
    """The contract's own policy, else its package's, else None (no SLA)."""
    return policies_for([contract]).get(contract.pk)


def policies_for(contracts: Iterable[Contract]) -> dict[int, SlaPolicy]:
    """Each contract's (by pk) own policy, else its package's; contracts without an SLA are left out.
    One query for all of them."""
    contracts = list(contracts)
    if not contracts:
        return {}
    policies = list(
        SlaPolicy.objects.filter(contract__in=contracts)
        | SlaPolicy.objects.filter(package_id__in={c.package_id for c in contracts})
    )
    own = {p.contract_id: p for p in policies if p.contract_id is not None}
    by_package = {p.package_id: p for p in policies if p.package_id is not None}
    found = {c.pk: own.get(c.pk) or by_package.get(c.package_id) for c in contracts}
    return {pk: policy for pk, policy in found.items() if policy is not None}


def ratio_percent(good: int, eligible: int) -> Fraction | None:
    """good ÷ eligible as an exact percentage; None when nothing was eligible (the objective is met)."""
    return None if eligible == 0 else Fraction(100 * good, eligible)


def credit_percent(measured: Fraction | None, steps: Iterable[CreditStep]) -> Decimal:
    """The credit of the lowest rung the measured value is strictly below; 0 when none (or no traffic).

    "< 99.9 % → 10 %" means exactly 99.9 % earns nothing: the comparison is exact, on fractions.
    """
    if measured is None:
        return Decimal(0)
    earned = [step.credit_percent for step in steps if measured < Fraction(step.below_percent)]
    return max(earned, default=Decimal(0))
