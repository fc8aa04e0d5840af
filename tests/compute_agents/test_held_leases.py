"""The lease arithmetic on its own (compute_agents.leases.held): no lock, no spool, no platform."""

from __future__ import annotations

from compute_agents.leases.held import HeldLeases, lease_deadline
from compute_agents.spool import SpooledLease

KEY, MONTH = "k" * 64, "2026-12"
SLOT = (KEY, MONTH)
S = 1_000_000_000


def spooled(lease: str, granted: int, *, used: int = 0, deadline_ns: int = 100 * S) -> SpooledLease:
    return SpooledLease(lease, KEY, MONTH, granted, used, deadline_ns, report_seq=0, reported=used)


def test_a_request_takes_the_oldest_lease_with_room_and_passes_the_older_ones_over() -> None:
    leases = HeldLeases([spooled("a", 100, used=90), spooled("b", 100)], now_ns=0)
    held, passed_over = leases.reserve(SLOT, 10, now_ns=1)
    assert held is not None and (held.spooled.lease, passed_over) == ("a", False)
    held, passed_over = leases.reserve(SLOT, 10, now_ns=1)  # "a" is full (90 used, 10 reserved)
    assert held is not None and (held.spooled.lease, passed_over) == ("b", True)
    held, passed_over = leases.reserve(SLOT, 10, now_ns=1)
    assert held is not None and (held.spooled.lease, passed_over) == ("b", False)  # marked once
    assert leases.reserve(SLOT, 81, now_ns=1) == (None, False)
    assert leases.room(SLOT, now_ns=1) == 80
    assert leases.room((KEY, "2026-11"), now_ns=1) == 0


def test_release_charges_the_spend_and_frees_the_reservation() -> None:
    leases = HeldLeases([spooled("a", 100)], now_ns=0)
    leases.reserve(SLOT, 40, now_ns=1)
    leases.release("a", 40, 25, now_ns=7)
    (held,) = leases.copies()
    assert (held.used, held.reserved, held.active_ns) == (25, 0, 7)
    assert leases.room(SLOT, now_ns=8) == 75


def test_past_its_deadline_or_closing_a_lease_has_no_room() -> None:
    leases = HeldLeases([spooled("a", 100, deadline_ns=10)], now_ns=0)
    assert leases.room(SLOT, now_ns=9) == 100 and leases.room(SLOT, now_ns=10) == 0
    leases = HeldLeases([spooled("a", 100)], now_ns=0)
    leases.close_idle()
    assert leases.reserve(SLOT, 1, now_ns=1) == (None, False)


def test_what_is_due_final_for_leases_done_with_a_renewal_for_those_in_use() -> None:
    idle_ns = 5 * S
    leases = HeldLeases([spooled("a", 100), spooled("b", 100), spooled("c", 100)], now_ns=0)
    leases.reserve(SLOT, 100, now_ns=S)  # fills "a"
    leases.release("a", 100, 30, now_ns=8 * S)  # 30 spent, in use at 8 s
    leases.reserve(SLOT, 80, now_ns=9 * S)  # "a" has 70 left: passed over for "b", reserved now
    due = {r.held.spooled.lease: (r.spent, r.final) for r in leases.due(9 * S, MONTH, idle_ns)}
    # "a": passed over, final; "b": reserved, not yet; "c": idle since 0, final
    assert due == {"a": (30, True), "c": (0, True)}
    assert [h.closing for h in leases.copies()] == [True, False, True]
    leases.release("b", 80, 50, now_ns=10 * S)
    due = {r.held.spooled.lease: (r.spent, r.final) for r in leases.due(11 * S, MONTH, idle_ns)}
    assert due["b"] == (50, False)  # in use with a new spend: a renewal
    later = leases.due(11 * S, "2027-01", idle_ns)  # the next month: every lease not reserved is final
    assert [(r.held.spooled.lease, r.spent, r.final) for r in later] == [
        ("a", 30, True),
        ("b", 50, True),
        ("c", 0, True),
    ]


def test_a_held_lease_is_kept_and_a_settled_one_dropped() -> None:
    leases = HeldLeases([spooled("a", 100, used=60)], now_ns=0)
    leases.hold(spooled("a", 100), granted_ns=5)  # answered again: kept as held
    leases.hold(spooled("b", 50), granted_ns=5)
    assert [(h.spooled.lease, h.used, h.active_ns) for h in leases.copies()] == [("a", 60, 0), ("b", 0, 5)]
    leases.drop("a")
    leases.drop("a")
    assert [h.spooled.lease for h in leases.copies()] == ["b"]


def test_the_deadline_is_the_expiry_less_a_margin_of_at_most_half() -> None:
    assert lease_deadline(S, 300.0, 30.0) == S + 270 * S
    assert lease_deadline(S, 20.0, 30.0) == S + 10 * S
