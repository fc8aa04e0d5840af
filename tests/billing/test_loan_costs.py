"""Cost attribution follows the scheduler's moves (issue 18.3): an executor lent to a subtree is that
subtree's for the time it is held. Its records are costed to the requests they served (the borrower's);
the GPU time held and not spent on records is charged to the borrowing subtree's contracts, in proportion
to their requests decided for it during the loan. Real signed v2 records through the ingest API, real
scheduler events through the platform's service."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from agents.models import Agent
from billing.costs import cost_report, loan_charges
from catalog.models import HostCostProfile
from contracts.models import Contract
from finance.selectors import cost_rows
from scheduling.services import EventInput, record_scheduler_events
from tests.billing.usage import ingest, routed_record
from tests.factories import ContractFactory, signing_agent
from treemeter_records import new_record_id
from treemeter_records.timeutil import unix_nanos

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
D = Decimal
BORROWED = datetime(2026, 11, 10, 10, 0, 0, tzinfo=UTC)
RETURNED = BORROWED + timedelta(seconds=10)
HOUR = (datetime(2026, 11, 10, 10, tzinfo=UTC), datetime(2026, 11, 10, 11, tzinfo=UTC))


def _move(router: Agent, kind: str, at: datetime, executor: str = "lent-1") -> EventInput:
    return EventInput(
        id=str(new_record_id()),
        kind=kind,
        at_ns=unix_nanos(at),
        subtree="batch",
        reason=f"{kind} in the test",
        figures={"load": 1.0},
        executor=executor,
        lender="default",
    )


@pytest.fixture
def loan() -> dict[str, Any]:
    """Subtree batch borrows lent-1 from default for 10 s; meanwhile lent-1 serves two of first's and one
    of second's batch requests (270,000 µs busy), and kept-1 one request decided for default."""
    HostCostProfile.objects.create(  # 3,600 per GPU hour: 1 per second, 0.000001 per µs
        host_class="gpu", depreciation_per_hour=D(3000), power_per_hour=D(600), operations_per_hour=D(0)
    )
    first, second, bystander = (ContractFactory.create(code=c) for c in ("first", "second", "bystander"))
    contracts = (first, second, bystander)
    router = signing_agent(*contracts, agent_id="router-1", kind="router")
    lent = signing_agent(*contracts, agent_id="lent-1")
    kept = signing_agent(*contracts, agent_id="kept-1")
    Agent.objects.filter(agent_id__in=("lent-1", "kept-1")).update(host_class="gpu")
    during = BORROWED + timedelta(seconds=2)
    ingest(lent, [routed_record(lent, router, c, "batch", during) for c in (first, first, second)])
    ingest(kept, [routed_record(kept, router, bystander, "default", during)])
    router_row = Agent.objects.get(agent_id="router-1")
    record_scheduler_events(
        router=router_row,
        events=[_move(router_row, "borrow", BORROWED), _move(router_row, "return", RETURNED)],
        now=RETURNED,
    )
    return {"router": router_row, "lent": lent, "router_agent": router, "second": second}


def test_the_idle_held_time_goes_to_the_borrowers_contracts_by_their_requests(loan: dict[str, Any]) -> None:
    # held 10,000,000 µs, busy 3 × 90,000: idle 9,730,000 µs × 0.000001 = 9.73, split 2 : 1
    charges = {c.contract: c.cost for c in loan_charges(*HOUR)}
    assert charges == {"first": D("9.73") * 2 / 3, "second": D("9.73") / 3}
    by_contract = {row.key: row for row in cost_report(*HOUR)}
    # each record: 90,000 µs of L3 = 0.09
    assert by_contract["first"].cost == D("0.18") + D("9.73") * 2 / 3
    assert by_contract["first"].loan_cost == D("9.73") * 2 / 3
    assert (by_contract["second"].cost, by_contract["second"].loan_cost) == (
        D("0.09") + D("9.73") / 3,
        D("9.73") / 3,
    )
    assert (by_contract["bystander"].cost, by_contract["bystander"].loan_cost) == (D("0.09"), D(0))
    finance = {row["package"]: row for row in cost_rows(*HOUR, "package")}
    first_package = Contract.objects.get(code="first").package.code
    assert finance[first_package]["loan_cost"] == D("6.49")  # 6.4866…, rounded once for the page


def test_a_period_that_cuts_the_loan_charges_the_part_inside_it(loan: dict[str, Any]) -> None:
    # [10:00:05, 11:00): 5 s held inside, no record started there: 5.00, still split by the loan's requests
    inside = (BORROWED + timedelta(seconds=5), HOUR[1])
    assert {c.contract: c.cost for c in loan_charges(*inside)} == {"first": D(5) * 2 / 3, "second": D(5) / 3}
    assert loan_charges(RETURNED, HOUR[1]) == []  # returned at its start: nothing held inside


def test_a_loan_not_returned_is_held_until_now(loan: dict[str, Any]) -> None:
    router = loan["router"]
    again = BORROWED + timedelta(minutes=30)
    record_scheduler_events(router=router, events=[_move(router, "borrow", again)], now=again)
    now = again + timedelta(seconds=4)
    assert [c for c in loan_charges(*HOUR, now=now) if c.loan.start == again] == []  # no request yet
    served = routed_record(
        loan["lent"], loan["router_agent"], loan["second"], "batch", again + timedelta(seconds=1)
    )
    ingest(loan["lent"], [served])
    charges = [c for c in loan_charges(*HOUR, now=now) if c.loan.start == again]
    # 4 s held until now, 90,000 µs of it serving: 3.91, all second's
    assert [(c.contract, c.loan.end, c.cost) for c in charges] == [("second", None, D("3.91"))]
