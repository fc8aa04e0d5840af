"""L2 preparation asked by the router: the executors' expert reports, per domain, become the next
decisions' preheat lists; a report the router cannot read steers nothing."""

from __future__ import annotations

from compute_agents.tree.preparation import DomainExperts, experts_header, parse_experts_header


def test_a_record_s_experts_travel_as_the_top_ones_per_layer() -> None:
    experts = [
        {"layer": 0, "expert": 1, "tokens": 5},
        {"layer": 0, "expert": 4, "tokens": 9},
        {"layer": 0, "expert": 7, "tokens": 5},
        {"layer": 1, "expert": 2, "tokens": 3},
    ]
    header = experts_header(experts, per_layer=2)
    assert header == "0:4,1;1:2"  # most tokens first, ties by expert id
    assert parse_experts_header(header) == [(0, 4), (0, 1), (1, 2)]
    for unreadable in ("0:x", "a:1", "0:70000", "0:1;" * 1000):
        assert parse_experts_header(unreadable) == []


def test_each_domain_preheats_what_its_recent_requests_used() -> None:
    domains = DomainExperts(history=2, per_layer=1)
    assert domains.preheat("legal") == []
    domains.learn("legal", [(0, 3), (1, 5)])
    domains.learn("legal", [(0, 3), (1, 6)])
    domains.learn("medical", [(0, 9)])
    assert domains.preheat("legal") == [[0, 3], [1, 5]]  # one per layer, most reported first
    assert domains.preheat("medical") == [[0, 9]] and domains.preheat(None) == []
    domains.learn("legal", [(1, 6)])  # history 2: the first report is forgotten
    assert domains.preheat("legal") == [[0, 3], [1, 6]]
