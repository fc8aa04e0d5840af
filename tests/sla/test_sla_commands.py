"""manage.py sla_close and sla_openslo."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from sla.models import Objective
from tests.factories import ContractFactory, signing_agent
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("clickhouse")
def test_sla_close_prints_the_report_and_refuses_bad_input(capsys: Any) -> None:
    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    store(
        records(agent, contract, 98, ns(2026, 11, 3))
        + records(agent, contract, 2, ns(2026, 11, 4), status="error")
    )
    call_command("sla_close", contract.code, "2026-11")
    out = capsys.readouterr().out
    assert "100 valid requests, credit 25 %" in out and "availability: 98.0000 % (target 99.9000 %)" in out
    assert "waiting for the month's invoice" in out
    with pytest.raises(CommandError, match="YYYY-MM"):
        call_command("sla_close", contract.code, "November")
    with pytest.raises(CommandError, match="period_open"):
        call_command("sla_close", contract.code, f"{datetime.now(UTC):%Y-%m}")
    with pytest.raises(CommandError, match="No contract"):
        call_command("sla_close", "nope", "2026-11")


def test_sla_openslo_round_trips_through_files(tmp_path: Path, capsys: Any) -> None:
    source = make_policy(ContractFactory.create(), latency=[("l2", "30", "99")])
    call_command("sla_openslo", "export", str(source.pk))
    exported = capsys.readouterr().out
    path = tmp_path / "slo.yaml"
    path.write_text(exported, encoding="utf-8")
    target = make_policy(ContractFactory.create(), availability=None, time_zone="UTC")
    call_command("sla_openslo", "import", str(target.pk), str(path))
    assert "now has 2 objectives" in capsys.readouterr().out
    assert list(Objective.objects.filter(policy=target).values_list("name", "threshold_ms")) == [
        ("availability", None),
        ("latency-l2", 30),
    ]
    path.write_text("kind: nonsense", encoding="utf-8")
    with pytest.raises(CommandError, match="Nothing imported"):
        call_command("sla_openslo", "import", str(target.pk), str(path))
