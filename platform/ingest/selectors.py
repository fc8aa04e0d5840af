"""Reads of ingest: what an agent's batches covered (seq ranges received, gaps still open)."""

from __future__ import annotations

from typing import Any

from agents.models import Agent
from ledger.selectors import LedgerLookupError


def completeness_report(agent_id: str, start: Any, end: Any) -> dict[str, Any]:
    """Seq ranges received and gaps for the batches an agent sent in [start, end)."""
    agent = Agent.objects.filter(agent_id=agent_id).first()
    if agent is None:
        raise LedgerLookupError(404, "unknown_agent", f"No agent {agent_id}.")
    batches = list(
        agent.batches.filter(received_at__gte=start, received_at__lt=end).values_list("first_seq", "last_seq")
    )
    if not batches:
        return {"agent_id": agent_id, "batches": 0, "ranges": [], "gaps": [], "complete": True}
    low, high = min(first for first, _ in batches), max(last for _, last in batches)
    ranges = [
        [max(r.first_seq, low), min(r.last_seq, high)]
        for r in agent.sequence_ranges.filter(first_seq__lte=high, last_seq__gte=low)
    ]
    gaps = [
        [max(g.first_missing, low), min(g.last_missing, high)]
        for g in agent.sequence_gaps.filter(closed_at=None, first_missing__lte=high, last_missing__gte=low)
    ]
    return {
        "agent_id": agent_id,
        "batches": len(batches),
        "first_seq": low,
        "last_seq": high,
        "ranges": ranges,
        "gaps": gaps,
        "missing": sum(b - a + 1 for a, b in gaps),
        "complete": not gaps,
    }
