"""What an invoice covers, for its period and contract: the logged records, those a dispute excluded
from billing, and each serving agent's seq span with the open gaps inside it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db.models import Count, Max, Min

from ingest.models import SequenceGap
from ledger.models import LogLeaf

from .exports import period_ns
from .models import BillingExclusion, Invoice


def invoice_completeness(invoice: Invoice) -> dict[str, Any]:
    """What an invoice covers, for its period and contract: the logged records (and how many of them a
    dispute excluded from billing), and per serving agent its seq span and the open gaps inside it."""
    return invoices_completeness([invoice])[0]


def invoices_completeness(invoices: Sequence[Invoice]) -> list[dict[str, Any]]:
    """`invoice_completeness` for many invoices at once (an invoice run's batch), in their order: the
    same reports from three set-based queries per period instead of three or more per invoice. The
    invoices need not be saved yet (their `invoice` key is then None)."""
    by_period: dict[tuple[int, int], list[tuple[int, Invoice]]] = defaultdict(list)
    for position, invoice in enumerate(invoices):
        by_period[period_ns(invoice)].append((position, invoice))
    reports: list[dict[str, Any]] = [{} for _ in invoices]
    for (start_ns, end_ns), group in by_period.items():
        owners = {
            "tenant__in": {i.tenant.code for _, i in group},
            "contract__in": {i.contract.code for _, i in group},
        }
        window = {"start_ns__gte": start_ns, "start_ns__lt": end_ns}
        per_agent = (
            LogLeaf.objects.filter(**owners, **window)
            .values("tenant", "contract", "agent__agent_id", "agent_id")
            .annotate(records=Count("index"), first_seq=Min("seq"), last_seq=Max("seq"))
            .order_by("tenant", "contract", "agent__agent_id")
        )
        agent_rows: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for found in per_agent:
            agent_rows[found["tenant"], found["contract"]].append(dict(found))
        open_gaps: dict[int, list[SequenceGap]] = defaultdict(list)
        agent_ids = {row["agent_id"] for rows in agent_rows.values() for row in rows}
        for gap in SequenceGap.objects.filter(agent_id__in=agent_ids, closed_at=None).order_by(
            "agent_id", "first_missing"
        ):
            open_gaps[gap.agent_id].append(gap)
        excluded = {
            (row["tenant"], row["contract"]): row["count"]
            for row in BillingExclusion.objects.filter(**owners, **window)
            .values("tenant", "contract")
            .annotate(count=Count("pk"))
            .order_by()
        }
        for position, invoice in group:
            owner = (invoice.tenant.code, invoice.contract.code)
            agents = []
            for row in agent_rows.get(owner, []):
                gaps = [
                    [max(g.first_missing, row["first_seq"]), min(g.last_missing, row["last_seq"])]
                    for g in open_gaps.get(row["agent_id"], [])
                    if g.first_missing <= row["last_seq"] and g.last_missing >= row["first_seq"]
                ]
                agents.append(
                    {
                        "agent_id": row["agent__agent_id"],
                        "records": row["records"],
                        "first_seq": row["first_seq"],
                        "last_seq": row["last_seq"],
                        "gaps": gaps,
                        "missing": sum(b - a + 1 for a, b in gaps),
                    }
                )
            reports[position] = {
                "invoice": invoice.pk,
                "contract": invoice.contract.code,
                "period_start": invoice.period_start.isoformat(),
                "period_end": invoice.period_end.isoformat(),
                "invoice_record_count": invoice.record_count,
                "logged_records": sum(a["records"] for a in agents),
                "excluded_records": excluded.get(owner, 0),
                "agents": agents,
                "complete": not any(a["gaps"] for a in agents),
            }
    return reports
