"""Exclusions leave the denominator; SLA months follow the policy's time zone, DST included."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError

from common.periods import month_bounds
from sla.models import Exclusion
from sla.services import compute_report, declare_exclusion
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


def test_exclusion_kinds_change_the_denominator(staff: Any) -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    # 900 good spread over Nov 10; a maintenance window with 40 failures and 10 successes;
    # a customer-dependency incident whose 30 failures leave but whose 20 successes stay.
    batch = records(agent, contract, 900, ns(2026, 11, 10))
    batch += records(agent, contract, 40, ns(2026, 11, 12, 2), status="error")
    batch += records(agent, contract, 10, ns(2026, 11, 12, 2, 30))
    batch += records(agent, contract, 30, ns(2026, 11, 14, 8), status="error")
    batch += records(agent, contract, 20, ns(2026, 11, 14, 8, 10))
    batch += records(agent, contract, 2, ns(2026, 11, 20), status="timeout")
    store(batch)
    before = compute_report(contract, "2026-11", now=datetime(2026, 11, 30, tzinfo=UTC))
    assert (before.valid_count, before.objectives[0]["good"]) == (1002, 930)

    declare_exclusion(
        contract,
        kind=Exclusion.Kind.MAINTENANCE,
        starts_at=datetime(2026, 11, 12, 2, tzinfo=UTC),
        ends_at=datetime(2026, 11, 12, 3, tzinfo=UTC),
        reason="Announced router upgrade",
        declared_by=staff,
    )
    declare_exclusion(
        contract,
        kind=Exclusion.Kind.CUSTOMER_DEPENDENCY,
        scope=Exclusion.Scope.FAILED,
        starts_at=datetime(2026, 11, 14, 8, tzinfo=UTC),
        ends_at=datetime(2026, 11, 14, 9, tzinfo=UTC),
        reason="Customer HIS answered 503",
        declared_by=staff,
    )
    report = compute_report(contract, "2026-11", now=AFTER_NOV)

    (availability,) = report.objectives
    assert (report.valid_count, report.excluded_count) == (922, 80)  # 1,002 − 50 − 30
    assert (availability["good"], availability["bad"]) == (920, 2)
    assert availability["measured_percent"] == "99.7830"  # 920 / 922
    assert report.credit_percent == 10
    assert [(x["kind"], x["declared_by"], x["reason"]) for x in report.exclusions] == [
        ("maintenance", "ops", "Announced router upgrade"),
        ("customer_dependency", "ops", "Customer HIS answered 503"),
    ]


def test_an_exclusion_needs_a_reason_and_a_window(staff: Any) -> None:
    contract = ContractFactory.create()
    when = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValidationError):
        declare_exclusion(
            contract, kind="maintenance", starts_at=when, ends_at=when, reason="x", declared_by=staff
        )
    with pytest.raises(ValidationError):
        declare_exclusion(
            contract,
            kind="contract_violation",
            starts_at=when,
            ends_at=datetime(2026, 11, 2, tzinfo=UTC),
            reason="  ",
            declared_by=staff,
        )
    assert Exclusion.objects.count() == 0


def test_month_edges_follow_the_contract_time_zone() -> None:
    contract = ContractFactory.create()
    make_policy(contract, time_zone="Asia/Shanghai")
    agent = signing_agent(contract)
    # 2026-10-31 16:00 UTC is already November 1st in Shanghai; 2026-11-30 16:00 UTC is December.
    store(
        records(agent, contract, 1, ns(2026, 10, 31, 15, 59, 59), status="error")  # Oct 31 23:59:59 local
        + records(agent, contract, 2, ns(2026, 10, 31, 16))  # Nov 1 00:00 local
        + records(agent, contract, 3, ns(2026, 11, 30, 15, 59, 57))  # Nov 30 23:59:57..59 local
        + records(agent, contract, 4, ns(2026, 11, 30, 16), status="error")  # Dec 1 local
    )
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    assert report.period_start == datetime(2026, 10, 31, 16, tzinfo=UTC)
    assert report.period_end == datetime(2026, 11, 30, 16, tzinfo=UTC)
    assert (report.valid_count, report.objectives[0]["good"]) == (5, 5)
    assert (report.daily[0]["day"], report.daily[-1]["day"], len(report.daily)) == (
        "2026-11-01",
        "2026-11-30",
        30,
    )


def test_a_dst_zone_month_has_its_local_length() -> None:
    """America/New_York: March 2026 has 30 days 23 hours (DST starts Mar 8); November 30 days 1 hour."""
    assert month_bounds("2026-03", "America/New_York") == (
        datetime(2026, 3, 1, 5, tzinfo=UTC),
        datetime(2026, 4, 1, 4, tzinfo=UTC),
    )
    start, end = month_bounds("2026-11", "America/New_York")
    assert (start, end) == (datetime(2026, 11, 1, 4, tzinfo=UTC), datetime(2026, 12, 1, 5, tzinfo=UTC))

    contract = ContractFactory.create()
    make_policy(contract, time_zone="America/New_York")
    agent = signing_agent(contract)
    new_york = ZoneInfo("America/New_York")
    store(
        records(agent, contract, 1, ns(2026, 3, 1, 0, 0, 0, tz=new_york))
        + records(agent, contract, 1, ns(2026, 3, 8, 3, 30, tz=new_york))  # just after the spring-forward gap
        + records(agent, contract, 1, ns(2026, 3, 31, 23, 59, 59, tz=new_york), status="error")
        + records(agent, contract, 1, ns(2026, 4, 1, 0, 0, 0, tz=new_york), status="error")  # April
        + records(agent, contract, 1, ns(2026, 2, 28, 23, 59, 59, tz=new_york), status="error")  # February
    )
    report = compute_report(contract, "2026-03", now=AFTER_NOV)
    days = {d["day"]: d["objectives"]["availability"]["eligible"] for d in report.daily}
    assert (report.valid_count, report.objectives[0]["good"]) == (3, 2)
    assert (days["2026-03-01"], days["2026-03-08"], days["2026-03-31"], len(days)) == (1, 1, 1, 31)


def test_month_bounds_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="YYYY-MM"):
        month_bounds("2026-13", "UTC")
