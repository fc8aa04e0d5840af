"""SLA terms: validation, which policy governs a contract, the ladder, and time-sliced objectives."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from sla.models import CreditStep, Objective, SlaPolicy
from sla.services import compute_report
from sla.terms import credit_percent, policy_for
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = pytest.mark.django_db


def test_objective_validation_names_the_problem() -> None:
    policy = make_policy(ContractFactory.create(), availability=None)
    cases = [
        (dict(kind="latency", target_percent=Decimal("99")), "threshold"),
        (dict(kind="availability", target_percent=Decimal("100")), "strictly between 0 and 100"),
        (dict(kind="availability", layer="l3", target_percent=Decimal("99")), "end to end"),
        (dict(kind="availability", target_percent=Decimal("99"), timeslice_minutes=5), "both"),
    ]
    for fields, message in cases:
        with pytest.raises(ValidationError, match=message):
            Objective(policy=policy, name="x", **fields).full_clean()
    with pytest.raises(ValidationError, match="IANA"):
        SlaPolicy(name="p", contract=ContractFactory.create(), time_zone="Mars/Olympus").full_clean()
    with pytest.raises(ValidationError, match="exactly one"):
        SlaPolicy(name="p", time_zone="UTC").full_clean()


def test_the_database_refuses_what_validation_refuses() -> None:
    policy = make_policy(ContractFactory.create(), availability=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Objective.objects.create(policy=policy, name="x", kind="latency", target_percent=Decimal("99"))
    with pytest.raises(IntegrityError), transaction.atomic():
        SlaPolicy.objects.create(name="orphan", time_zone="UTC")


def test_a_contract_policy_overrides_its_package_policy() -> None:
    contract = ContractFactory.create()
    package_policy = make_policy(package=contract.package)
    assert policy_for(contract) == package_policy
    own = make_policy(contract, availability="99")
    assert policy_for(contract) == own
    assert policy_for(ContractFactory.create()) is None


def test_ladder_is_exact_at_the_boundary() -> None:
    objective = make_policy(ContractFactory.create()).objectives.get()
    steps = list(objective.credit_steps.all())
    assert credit_percent(Fraction(999, 10), steps) == 0
    assert credit_percent(Fraction(999, 10) - Fraction(1, 10**12), steps) == 10
    assert credit_percent(Fraction(99), steps) == 10
    assert credit_percent(Fraction(95), steps) == 25
    assert credit_percent(Fraction(0), steps) == 100
    assert credit_percent(None, steps) == 0
    assert [str(s) for s in CreditStep.objects.filter(objective=objective)] == [
        "< 99.9000 % → 10.0000 %",
        "< 99.0000 % → 25.0000 %",
        "< 95.0000 % → 100.0000 %",
    ]


@pytest.mark.usefixtures("clickhouse")
def test_timesliced_objective_counts_bad_slices() -> None:
    """November in UTC has 8,640 five-minute slices; a slice is good at ≥ 95 % of its requests."""
    contract = ContractFactory.create()
    policy = make_policy(contract, time_zone="UTC", availability=None)
    objective = Objective.objects.create(
        policy=policy,
        name="availability-5m",
        kind="availability",
        target_percent=Decimal("99.5"),
        timeslice_minutes=5,
        timeslice_target_percent=Decimal("95"),
    )
    CreditStep.objects.create(
        objective=objective, below_percent=Decimal("99.99"), credit_percent=Decimal("5")
    )
    agent = signing_agent(contract)
    batch = []
    for day in (3, 4, 5):  # three slices at 9 of 10: bad
        batch += records(agent, contract, 9, ns(2026, 11, day, 10)) + records(
            agent, contract, 1, ns(2026, 11, day, 10, 1), status="error"
        )
    # 19 of 20: exactly 95 %, a good slice
    batch += records(agent, contract, 19, ns(2026, 11, 6, 10)) + records(
        agent, contract, 1, ns(2026, 11, 6, 10, 2), status="error"
    )
    store(batch)

    report = compute_report(contract, "2026-11", now=datetime(2026, 12, 2, tzinfo=UTC))

    (result,) = report.objectives
    assert (result["unit"], result["eligible"], result["good"], result["bad"]) == (
        "timeslices",
        8640,
        8637,
        3,
    )
    assert result["measured_percent"] == "99.9652"  # 8,637 / 8,640
    assert result["error_budget"] == "43.2000"  # 0.5 % of 8,640 slices
    assert result["budget_spent_percent"] == "6.9444"
    assert report.credit_percent == 5
