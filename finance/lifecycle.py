"""The package lifecycle report: per compute package and calendar month or quarter (UTC), its calls
(records of every status), active customers (tenants that made a call), the contracts that ended and
how many of them were renewed, base-fee and outcome revenue, net revenue, cost and gross margin. A
package on sale (`_launches`) with fewer than RETIRE_BELOW calls in each of two consecutive closed
quarters is flagged for retirement.

Money is per currency: a package billed in two currencies has one row per currency, each repeating the
package's calls, customers and renewals (they have no currency). Revenue is that of the finalised and
paid invoices whose period starts in the bucket (selectors.cost_rows, as on the cost page).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F, Min, Q, Sum
from django.db.models.functions import TruncMonth, TruncQuarter

from billing.costs import revenue_invoices
from billing.models import InvoiceLine
from catalog.models import ComputePackage
from clickhouse_store.queries.packages import package_calls
from common.periods import month_bounds, parse_month
from contracts.models import Contract
from pricing.dimensions import Dimension

from .selectors import cost_rows

PERIODS = ("quarter", "month")
RETIRE_BELOW = 500
# A contract is renewed when its tenant's next contract of the same package starts by this long after
# its end (a renewal signed early, before the end, counts too).
RENEWAL_GRACE = timedelta(days=31)
MAX_BUCKETS = 36  # a report longer than this is refused: each bucket is one cost attribution
RETIRE = "retire"


@dataclass(frozen=True)
class Bucket:
    """One month ("2026-11") or quarter ("2026-Q4"), [start, end) in UTC."""

    name: str
    start: datetime
    end: datetime


class RangeError(ValueError):
    """The months do not make a report: reversed, or longer than MAX_BUCKETS buckets."""


def buckets(period: str, first_month: str, last_month: str) -> list[Bucket]:
    """The months, or the quarters holding them, from ``first_month`` to ``last_month`` (YYYY-MM)."""
    first, last = parse_month(first_month), parse_month(last_month)
    if last < first:
        raise RangeError(f"{last_month} is before {first_month}.")
    step = 3 if period == "quarter" else 1
    year, month = first[0], first[1] - (first[1] - 1) % step
    out: list[Bucket] = []
    while (year, month) <= last:
        start = month_bounds(f"{year:04d}-{month:02d}")[0]
        after = (year + (month + step - 1) // 12, (month + step - 1) % 12 + 1)
        end = month_bounds(f"{after[0]:04d}-{after[1]:02d}")[0]
        name = f"{year:04d}-Q{(month - 1) // 3 + 1}" if step == 3 else f"{year:04d}-{month:02d}"
        out.append(Bucket(name, start, end))
        if len(out) > MAX_BUCKETS:
            raise RangeError(f"At most {MAX_BUCKETS} {period}s in one report.")
        year, month = after
    return out


def lifecycle_rows(period: str, first_month: str, last_month: str, now: datetime) -> list[dict[str, Any]]:
    """The report's rows, by package, then bucket, then currency."""
    shown = buckets(period, first_month, last_month)
    previous = _bucket_before(shown[0], period)
    calls = {(c.package, c.bucket): c for c in package_calls(period, previous.start, shown[-1].end)}
    renewals = _renewals(shown)
    money = _revenue(period, shown)
    packages = sorted(set(ComputePackage.objects.values_list("code", flat=True)) | {p for p, _ in calls})
    launched = _launches()
    rows = []
    for package in packages:
        for before, bucket in itertools.pairwise([previous, *shown]):
            used = calls.get((package, bucket.start.date()))
            earlier = calls.get((package, before.start.date()))
            count, before_count = (used.calls if used else 0), (earlier.calls if earlier else 0)
            ended, renewed = renewals.get((package, bucket.start), (0, 0))
            on_sale = package in launched and launched[package] <= before.start
            retire = (
                period == "quarter"
                and on_sale
                and bucket.end <= now
                and max(count, before_count) < RETIRE_BELOW
            )
            common = {
                "package": package,
                "period": bucket.name,
                "period_start": bucket.start,
                "state": "closed" if bucket.end <= now else "open",
                "calls": count,
                "active_customers": used.customers if used else 0,
                "contracts_ended": ended,
                "contracts_renewed": renewed,
                "renewal_rate": (Decimal(renewed) / ended).quantize(Decimal("1E-4")) if ended else None,
                "retirement": RETIRE if retire else "",
            }
            rows += [{**common, **figures} for figures in money.get((package, bucket.start), [{}])]
    return rows


def _launches() -> dict[str, datetime]:
    """When each package was first on sale: the start of its earliest contract. A package is judged for
    retirement only over quarters it was on sale for from their start (never one nobody has bought)."""
    rows = Contract.objects.production().values("package__code").annotate(first=Min("starts_at"))
    return {row["package__code"]: row["first"] for row in rows}


def _bucket_before(first: Bucket, period: str) -> Bucket:
    """The bucket just before ``first``: its calls decide ``first``'s retirement flag."""
    month = (first.start - timedelta(days=1)).astimezone(UTC)
    return buckets(period, f"{month:%Y-%m}", f"{month:%Y-%m}")[0]


def _renewals(shown: list[Bucket]) -> dict[tuple[str, datetime], tuple[int, int]]:
    """Per (package, bucket start): how many contracts ended in the bucket, and how many of those their
    tenant renewed (RENEWAL_GRACE)."""
    start, end = shown[0].start, shown[-1].end
    ending = list(
        Contract.objects.production()
        .filter(ends_at__gte=start, ends_at__lt=end)
        .values("pk", "tenant_id", "package_id", "starts_at", "ends_at", package_code=F("package__code"))
    )
    successors: dict[tuple[int, int], list[datetime]] = defaultdict(list)
    for later in (
        Contract.objects.production()
        .filter(
            tenant_id__in={c["tenant_id"] for c in ending}, package_id__in={c["package_id"] for c in ending}
        )
        .values("pk", "tenant_id", "package_id", "starts_at")
    ):
        successors[(later["tenant_id"], later["package_id"])].append(later["starts_at"])
    out: dict[tuple[str, datetime], tuple[int, int]] = {}
    for contract in ending:
        starts, ends = contract["starts_at"], contract["ends_at"]
        assert ends is not None  # the filter above
        bucket = next(b for b in shown if b.start <= ends < b.end)
        renewed = any(
            starts < begins <= ends + RENEWAL_GRACE
            for begins in successors[(contract["tenant_id"], contract["package_id"])]
        )
        counted, kept = out.get((contract["package_code"], bucket.start), (0, 0))
        out[(contract["package_code"], bucket.start)] = (counted + 1, kept + renewed)
    return out


def _revenue(period: str, shown: list[Bucket]) -> dict[tuple[str, datetime], list[dict[str, Any]]]:
    """Per (package, bucket start): one entry per currency with its base-fee and outcome revenue (lines
    before notes), net revenue, cost and gross margin."""
    trunc = TruncQuarter if period == "quarter" else TruncMonth
    lines = (
        InvoiceLine.objects.filter(invoice__in=revenue_invoices(shown[0].start, shown[-1].end))
        .annotate(bucket=trunc("invoice__period_start", tzinfo=UTC))
        .values("bucket", "invoice__currency", package=F("invoice__contract__package__code"))
        .annotate(
            base=Sum("amount", filter=Q(kind=InvoiceLine.Kind.BASE_FEE)),
            outcome_fees=Sum(
                "amount",
                filter=Q(
                    dimension=Dimension.OUTCOMES,
                    kind__in=[InvoiceLine.Kind.USAGE, InvoiceLine.Kind.ADJUSTMENT],
                ),
            ),
        )
    )
    parts: dict[tuple[Any, ...], dict[str, Any]] = {
        (r["package"], r["bucket"], r["invoice__currency"]): dict(r) for r in lines
    }
    out: dict[tuple[str, datetime], list[dict[str, Any]]] = defaultdict(list)
    for bucket in shown:
        for row in cost_rows(bucket.start, bucket.end, "package"):
            if not row["currency"]:
                continue
            part = parts.get((row["package"], bucket.start, row["currency"]), {})
            out[(row["package"], bucket.start)].append(
                {
                    "currency": row["currency"],
                    "base_revenue": part.get("base") or Decimal("0.00"),
                    "outcome_revenue": part.get("outcome_fees") or Decimal("0.00"),
                    "net_revenue": row["revenue"],
                    "cost": row["cost"],
                    "cost_currency": row["cost_currency"],
                    "gross_margin": row["gross_margin"],
                }
            )
    return out
