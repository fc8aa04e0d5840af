"""Usage dashboard API: thin GET views over usage.selectors, scoped to the caller's tenant.

Every view answers JSON in the shapes the portal charts read; the `X-Usage-Source` header says whether
the answer came from the stored rollups (`rollup`) or from the raw records (`raw`), and `X-Usage-Cache`
whether it was computed now (`miss`) or kept from an earlier identical question over the same data
(`hit`; usage.cache). Answers are kept rendered (the JSON bytes DRF's JSONRenderer makes), so a kept
one is sent as it is, not decoded and encoded again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.access import principal_of
from contracts.models import Contract

from . import selectors
from .cache import cached_answer

DEFAULT_DAYS = 30
MAX_RANGE = timedelta(days=366)
# Records are stored with times ClickHouse's DateTime covers (1970 to 2106); queries stay within it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC) + MAX_RANGE
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
_DATE_FORMATS = ["iso-8601", "%Y-%m-%d"]  # rest_framework.ISO_8601, then a bare date


class UsageQuerySerializer(serializers.Serializer):
    """The filters every usage endpoint takes. Times are ISO 8601 (a date means its UTC midnight; no
    offset means UTC). Default: the last 30 UTC days, today included."""

    start = serializers.DateTimeField(required=False, input_formats=_DATE_FORMATS, default_timezone=UTC)
    end = serializers.DateTimeField(required=False, input_formats=_DATE_FORMATS, default_timezone=UTC)
    contract = serializers.CharField(required=False, max_length=64)
    package = serializers.CharField(required=False, max_length=64)
    tenant = serializers.CharField(required=False, max_length=64, help_text="Staff only: one tenant's usage.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start, end = attrs.get("start"), attrs.get("end")
        for name, value in (("start", start), ("end", end)):
            if value is not None and not EARLIEST <= value <= LATEST:
                raise serializers.ValidationError(
                    {name: f"Times lie between {EARLIEST.date()} and {LATEST.date()}."}, code="out_of_range"
                )
        if end is None:
            end = start + timedelta(days=DEFAULT_DAYS) if start else _tomorrow()
        if start is None:
            start = end - timedelta(days=DEFAULT_DAYS)
        if start >= end:
            raise serializers.ValidationError({"end": "end must be after start."}, code="invalid_range")
        if end - start > MAX_RANGE:
            raise serializers.ValidationError(
                {"end": f"A query covers at most {MAX_RANGE.days} days."}, code="range_too_long"
            )
        return {**attrs, "start": start, "end": end}


def _tomorrow() -> datetime:
    now = datetime.now(UTC)
    return datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)


class TimeseriesQuery(UsageQuerySerializer):
    dimension = serializers.ChoiceField(choices=list(selectors.DIMENSIONS))
    interval = serializers.ChoiceField(choices=list(selectors.INTERVALS), default="day")


class RoutingQuery(UsageQuerySerializer):
    interval = serializers.ChoiceField(choices=list(selectors.INTERVALS), default="day")


class BreakdownQuery(UsageQuerySerializer):
    by = serializers.ChoiceField(choices=list(selectors.BREAKDOWN_KEYS))


@dataclass(frozen=True)
class RenderedAnswer:
    """A dashboard answer as sent: its JSON, and whether it came from the stored rollups."""

    content: bytes
    from_rollup: bool


def _answer(
    request: Request,
    query_class: type[UsageQuerySerializer],
    question: str,
    read: Callable[[selectors.UsageFilter, dict[str, Any]], selectors.Answer],
    *,
    options: tuple[str, ...] = (),
    add: Callable[[QuerySet[Contract]], dict[str, Any]] | None = None,
    cached: bool = True,
) -> HttpResponse:
    """Validate the query, scope it to the caller, and answer from the cache or from ClickHouse.

    `options` name the query parameters besides the filter that change the answer (part of the cache
    key); `add` contributes PostgreSQL-side parts of the answer (contract terms), kept with it until
    the terms change (usage.cache); `cached=False` answers afresh every time, for an answer that also
    states what the data version does not follow (the scheduler's events).
    """
    params = query_class(data=request.query_params.dict())
    params.is_valid(raise_exception=True)
    data = params.validated_data
    usage, contracts = selectors.scoped_filter(
        principal_of(request),
        data["start"],
        data["end"],
        tenant=data.get("tenant"),
        contract=data.get("contract"),
        package=data.get("package"),
    )
    chosen = {name: data[name] for name in options}

    def compute() -> RenderedAnswer:
        answer = read(usage, chosen)
        body = {**answer.body, **add(contracts)} if add is not None else answer.body
        return RenderedAnswer(JSONRenderer().render(body), answer.from_rollup)

    if cached:
        answer, hit = cached_answer(question, usage, chosen, compute, states_terms=add is not None)
    else:
        answer, hit = compute(), False
    headers = {
        "X-Usage-Source": "rollup" if answer.from_rollup else "raw",
        "X-Usage-Cache": "hit" if hit else "miss",
    }
    return HttpResponse(answer.content, content_type="application/json", headers=headers)


class UsageView(APIView):
    """A usage endpoint: JSON only, since its answers are kept rendered."""

    renderer_classes = [JSONRenderer]


def _decimal() -> serializers.Field:
    return serializers.CharField(help_text="A decimal number as a string.")


def _ratio() -> serializers.Field:
    return serializers.CharField(allow_null=True, help_text="Fixed decimals; null when undefined.")


def _ms() -> serializers.Field:
    return serializers.CharField(allow_null=True, help_text="Milliseconds, 3 decimals; null without traffic.")


TimeseriesAnswer = inline_serializer(
    "UsageTimeseries",
    {
        "dimension": serializers.CharField(),
        "interval": serializers.CharField(),
        "series": inline_serializer(
            "UsageSeries",
            {
                "package": serializers.CharField(),
                "points": serializers.ListField(
                    child=serializers.ListField(child=serializers.CharField()), help_text="[ISO time, value]"
                ),
            },
            many=True,
        ),
    },
)
ExpertsAnswer = inline_serializer(
    "UsageExperts",
    {
        "layers": serializers.IntegerField(),
        "experts": serializers.IntegerField(),
        "cells": serializers.ListField(
            child=serializers.ListField(child=serializers.IntegerField()), help_text="[layer, expert, tokens]"
        ),
    },
)
RoutingAnswer = inline_serializer(
    "UsageRouting",
    {
        "points": serializers.ListField(
            child=serializers.ListField(child=serializers.CharField(allow_null=True)),
            help_text="[ISO time, avg hops, cache hit rate]",
        ),
        "totals": inline_serializer(
            "UsageRoutingTotals",
            {"requests": serializers.IntegerField(), "avg_hops": _ratio(), "cache_hit_rate": _ratio()},
        ),
    },
)
LatencyAnswer = inline_serializer(
    "UsageLatency",
    {
        "layers": inline_serializer(
            "LatencyLayers",
            {
                layer: inline_serializer(f"Latency{layer.title()}", {p: _ms() for p in selectors.PERCENTILES})
                for layer in selectors.LATENCY_LAYERS
            },
        ),
        "sla": inline_serializer(
            "LatencyObjective",
            {
                "policy": serializers.CharField(),
                "objective": serializers.CharField(),
                # the chart's layers, and the queue wait (an SLA layer the hourly rollup does not chart)
                "layer": serializers.ChoiceField(
                    choices=list(dict.fromkeys([*selectors.LATENCY_LAYERS, *selectors.SLA_LAYERS.values()]))
                ),
                "threshold_ms": _decimal(),
                "target_percent": _decimal(),
                "contracts": serializers.ListField(child=serializers.CharField()),
            },
            many=True,
        ),
    },
)
BreakdownAnswer = inline_serializer(
    "UsageBreakdown",
    {
        "by": serializers.CharField(),
        "rows": inline_serializer(
            "UsageBreakdownRow",
            {"key": serializers.CharField(), **{name: _decimal() for name in selectors.BREAKDOWN_DIMENSIONS}},
            many=True,
        ),
    },
)

_SERVICE_POINT = (
    "[ISO time, P99 ms, requests in flight, mean wait in line ms (decimal strings), answers (integer)]"
)
SubtreesAnswer = inline_serializer(
    "UsageSubtrees",
    {
        "bucket_s": serializers.IntegerField(help_text="The length of a service point's bucket."),
        "subtrees": inline_serializer(
            "UsageSubtree",
            {
                "subtree": serializers.CharField(),
                "sla_p99_ms": _ms(),
                # Mixed tuples (strings and whole numbers): each item's help text gives its shape.
                "service": serializers.ListField(
                    child=serializers.ListField(child=serializers.JSONField()), help_text=_SERVICE_POINT
                ),
                "replicas": serializers.ListField(
                    child=serializers.ListField(child=serializers.JSONField()),
                    help_text="Scaling steps: [ISO time, desired replicas (integer), scale_up or scale_down]",
                ),
                "moves": serializers.ListField(
                    child=serializers.ListField(child=serializers.JSONField()),
                    help_text="Capacity lent to it: [ISO time, borrow or return, executors (integer)]",
                ),
            },
            many=True,
        ),
        "events_truncated": serializers.BooleanField(
            help_text=f"Only the newest {selectors.SUBTREE_EVENTS_MAX} scheduler events are included."
        ),
    },
)


class TimeseriesView(UsageView):
    @extend_schema(parameters=[TimeseriesQuery], responses={200: TimeseriesAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(
            request,
            TimeseriesQuery,
            "timeseries",
            lambda usage, o: selectors.timeseries(usage, o["dimension"], o["interval"]),
            options=("dimension", "interval"),
        )


class ExpertsView(UsageView):
    @extend_schema(parameters=[UsageQuerySerializer], responses={200: ExpertsAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(request, UsageQuerySerializer, "experts", lambda usage, _: selectors.experts(usage))


class RoutingView(UsageView):
    @extend_schema(parameters=[RoutingQuery], responses={200: RoutingAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(
            request,
            RoutingQuery,
            "routing",
            lambda usage, o: selectors.routing(usage, o["interval"]),
            options=("interval",),
        )


class LatencyView(UsageView):
    @extend_schema(parameters=[UsageQuerySerializer], responses={200: LatencyAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(
            request,
            UsageQuerySerializer,
            "latency",
            lambda usage, _: selectors.latency(usage),
            add=lambda contracts: {"sla": selectors.latency_objectives(contracts)},
        )


class BreakdownView(UsageView):
    @extend_schema(parameters=[BreakdownQuery], responses={200: BreakdownAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(
            request,
            BreakdownQuery,
            "breakdown",
            lambda usage, o: selectors.breakdown(usage, o["by"]),
            options=("by",),
        )


class SubtreesView(UsageView):
    """The subtrees that served the caller's requests: their service over time from the caller's own
    records, and the scaling steps, borrows and returns their routers reported (docs/scheduler.md).
    Never kept: the scheduler's events change without a new data version."""

    @extend_schema(parameters=[UsageQuerySerializer], responses={200: SubtreesAnswer})
    def get(self, request: Request) -> HttpResponse:
        return _answer(
            request,
            UsageQuerySerializer,
            "subtrees",
            lambda usage, _: selectors.subtrees(usage),
            cached=False,
        )
