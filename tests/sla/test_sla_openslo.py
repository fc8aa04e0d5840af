"""OpenSLO v1 export and import of SLA objectives, round trip included."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

from sla.models import Objective, SlaPolicy
from sla.openslo import OpenSloError, export_policy, import_policy
from tests.factories import ComputePackageFactory, ContractFactory
from tests.sla.helpers import make_policy

pytestmark = pytest.mark.django_db


def seed_000_policy() -> SlaPolicy:
    """Seed 000: availability with the Bedrock ladder, per-layer latency, 99.9 % within 200 ms."""
    policy = make_policy(
        package=ComputePackageFactory.create(code="review-contracts"),
        latency=[("l1", "10", "99"), ("l2", "30", "99"), ("l3", "150", "99"), ("e2e", "200", "99.9")],
    )
    Objective.objects.create(
        policy=policy,
        name="availability-5m",
        kind="availability",
        target_percent=Decimal("99.5"),
        timeslice_minutes=5,
        timeslice_target_percent=Decimal("95"),
    )
    return policy


def terms(policy: SlaPolicy) -> list[tuple]:
    return [
        (
            o.name,
            o.kind,
            o.layer,
            o.threshold_ms,
            o.target_percent,
            o.timeslice_minutes,
            o.timeslice_target_percent,
            [(s.below_percent, s.credit_percent) for s in o.credit_steps.all()],
        )
        for o in policy.objectives.order_by("name")
    ]


def test_export_is_openslo_v1() -> None:
    docs = list(yaml.safe_load_all(export_policy(seed_000_policy())))
    assert len(docs) == 6
    availability = docs[0]
    assert (availability["apiVersion"], availability["kind"], availability["metadata"]["name"]) == (
        "openslo/v1",
        "SLO",
        "availability",
    )
    assert availability["spec"]["service"] == "review-contracts"
    assert availability["spec"]["budgetingMethod"] == "Occurrences"
    assert availability["spec"]["objectives"] == [{"displayName": "availability", "target": 0.999}]
    assert availability["spec"]["timeWindow"] == [
        {
            "duration": "1M",
            "isRolling": False,
            "calendar": {"startTime": "2020-01-01 00:00:00", "timeZone": "Asia/Shanghai"},
        }
    ]
    l3 = next(d for d in docs if d["metadata"]["name"] == "latency-l3")
    assert l3["spec"]["indicator"]["spec"]["ratioMetric"]["good"]["metricSource"] == {
        "type": "Treemeter",
        "spec": {"kind": "latency", "layer": "l3", "select": "good", "thresholdMs": "150"},
    }
    sliced = docs[-1]
    assert sliced["spec"]["budgetingMethod"] == "Timeslices"
    assert sliced["spec"]["objectives"] == [
        {"displayName": "availability-5m", "target": 0.995, "timeSliceTarget": 0.95, "timeSliceWindow": "5m"}
    ]


def test_round_trip_keeps_every_term() -> None:
    original = seed_000_policy()
    text = export_policy(original)
    copy = SlaPolicy.objects.create(name="copy", contract=ContractFactory.create(), time_zone="UTC")

    import_policy(copy, text)

    copy.refresh_from_db()
    assert copy.time_zone == "Asia/Shanghai"
    assert terms(copy) == terms(original)
    assert terms(copy)[0][-1] == [
        (Decimal("99.9"), Decimal("10")),
        (Decimal("99"), Decimal("25")),
        (Decimal("95"), Decimal("100")),
    ]
    again = export_policy(copy).replace(f"service: {copy.contract.code}", "service: review-contracts")  # type: ignore[union-attr]
    assert again == text.replace("SLA review-contracts:", "copy:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: openslo/v2\nkind: SLO\n", "expected apiVersion openslo/v1"),
        (": : :", "not YAML"),
        ("", "no SLO documents"),
    ],
)
def test_bad_yaml_is_refused_and_changes_nothing(text: str, message: str) -> None:
    policy = seed_000_policy()
    before = terms(policy)
    with pytest.raises(OpenSloError, match=message):
        import_policy(policy, text)
    assert terms(policy) == before


def test_an_invalid_objective_in_the_stream_changes_nothing() -> None:
    policy = seed_000_policy()
    before = terms(policy)
    broken = export_policy(policy).replace("target: 0.999\n", "target: 1.5\n", 1)
    with pytest.raises(OpenSloError, match="invalid objective"):
        import_policy(policy, broken)
    assert terms(policy) == before
