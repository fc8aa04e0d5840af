"""Multi-window, multi-burn-rate alerts (Google SRE workbook, chapter 5), one query per policy.

A rule fires when the error budget burns at least `factor` times the sustainable rate over both its
long window (the alert is significant) and its short window (it is still happening); it resolves
as soon as that no longer holds, so a single slow request, or an incident that has ended, never pages.
Burn rate = bad ÷ eligible over the window, divided by the objective's allowed bad fraction.
The beat job evaluates all contracts of one policy with one query (grouped by contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.utils import timezone

from clickhouse_store.queries import sla as sla_sql
from contracts.models import Contract

from .alerting import Condition, reconcile
from .models import Objective, SlaAlert, SlaPolicy
from .selectors import contract_codes, exclusion_windows, exclusions_of, indicator
from .terms import policy_for


@dataclass(frozen=True)
class Rule:
    name: str
    severity: str
    factor: Fraction
    long: timedelta
    short: timedelta


RULES = (
    Rule("page-1h", SlaAlert.Severity.PAGE, Fraction("14.4"), timedelta(hours=1), timedelta(minutes=5)),
    Rule("page-6h", SlaAlert.Severity.PAGE, Fraction(6), timedelta(hours=6), timedelta(minutes=30)),
    Rule("ticket-1d", SlaAlert.Severity.TICKET, Fraction(3), timedelta(days=1), timedelta(hours=2)),
    Rule("ticket-3d", SlaAlert.Severity.TICKET, Fraction(1), timedelta(days=3), timedelta(hours=6)),
)
WINDOWS = sorted({w for rule in RULES for w in (rule.long, rule.short)})


def window_counts(
    contracts: Sequence[Contract], objectives: Sequence[Objective], now: datetime
) -> dict[str, list[sla_sql.WindowCounts]]:
    """{contract code: per objective {window: (eligible, good)}} for every window ending at `now`.

    One query for all the contracts (they share `objectives`: the same policy), grouped by contract.
    """
    return sla_sql.window_counts(
        *contract_codes(contracts),
        [indicator(o) for o in objectives],
        WINDOWS,
        now,
        exclusion_windows(exclusions_of(contracts, now - WINDOWS[-1], now)),
    )


def burn_rate(eligible: int, good: int, target_percent: Decimal) -> Fraction:
    if eligible == 0:
        return Fraction(0)
    allowed = (100 - Fraction(target_percent)) / 100
    return Fraction(eligible - good, eligible) / allowed


def _rate_text(rate: Fraction) -> str:
    return str((Decimal(rate.numerator) / Decimal(rate.denominator)).quantize(Decimal("0.0001")))


def evaluate_burn_rates(contract: Contract, *, now: datetime | None = None) -> int:
    """Open, keep or resolve the contract's burn-rate alerts at `now`; returns how many are open."""
    policy = policy_for(contract)
    if policy is None:
        return 0
    return evaluate_policy_burn_rates(policy, [contract], now=now)[contract.code]


def evaluate_policy_burn_rates(
    policy: SlaPolicy, contracts: Sequence[Contract], *, now: datetime | None = None
) -> dict[str, int]:
    """Burn-rate alerts for contracts governed by `policy`, from one query; open alerts per contract.

    At most one open alert per objective and rule; rerunning at the same `now` changes nothing.
    """
    now = now or timezone.now()
    objectives = list(policy.objectives.all())
    counts = window_counts(contracts, objectives, now) if objectives and contracts else {}
    open_counts = {}
    for contract in contracts:
        holding: dict[tuple[str, str], Condition] = {}
        for objective, windows in zip(objectives, counts.get(contract.code, []), strict=True):
            for rule in RULES:
                long_rate = burn_rate(*windows[rule.long], objective.target_percent)
                short_rate = burn_rate(*windows[rule.short], objective.target_percent)
                if long_rate >= rule.factor and short_rate >= rule.factor:
                    holding[(rule.name, objective.name)] = Condition(
                        severity=rule.severity,
                        objective=objective,
                        measured={
                            "factor": _rate_text(rule.factor),
                            "long_window_s": int(rule.long.total_seconds()),
                            "short_window_s": int(rule.short.total_seconds()),
                            "long_burn_rate": _rate_text(long_rate),
                            "short_burn_rate": _rate_text(short_rate),
                        },
                    )
        open_counts[contract.code] = reconcile(contract, SlaAlert.Kind.BURN_RATE, holding, now)
    return open_counts
