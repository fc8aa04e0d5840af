"""`GET /v1/contracts/<code>/events?month=YYYY-MM`: a contract's business events of a month (UTC), per
package: how many are billable, failed acceptance or partial, and the events with their records
(billing.business_events)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.access import principal_of
from common.fields import MonthField
from common.periods import month_bounds, month_of
from contracts.models import Contract
from contracts.selectors import visible_contracts

from .business_events import STATUSES, business_events

MAX_EVENTS = 1000


class EventsQuerySerializer(serializers.Serializer):
    month = MonthField(required=False, help_text="YYYY-MM (UTC); default: this month.")
    status = serializers.ChoiceField(choices=list(STATUSES), required=False, help_text="Only these events.")
    limit = serializers.IntegerField(
        min_value=0, max_value=MAX_EVENTS, default=100, help_text="Events listed."
    )


class EventRecordSerializer(serializers.Serializer):
    record_id = serializers.CharField()
    model_id = serializers.CharField()
    status = serializers.CharField()
    accepted = serializers.BooleanField(help_text="Its capability's acceptance rule holds for it.")
    start_time = serializers.DateTimeField()


class EventSerializer(serializers.Serializer):
    event_id = serializers.CharField()
    package = serializers.CharField()
    status = serializers.ChoiceField(choices=list(STATUSES))
    missing = serializers.ListField(
        child=serializers.CharField(), help_text="Required capabilities not served."
    )
    not_accepted = serializers.ListField(
        child=serializers.CharField(), help_text="Required capabilities whose results failed acceptance."
    )
    records = EventRecordSerializer(many=True)


class PackageEventsSerializer(serializers.Serializer):
    package = serializers.CharField()
    unit = serializers.CharField(help_text="The business event it is measured in.")
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Events per status.")


class EventsReportSerializer(serializers.Serializer):
    contract = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    packages = PackageEventsSerializer(many=True)
    events = EventSerializer(many=True, help_text="The first `limit` events (of `status`), by event id.")


class ContractEventsView(APIView):
    """A contract's business events of a month (another tenant's contract answers 404)."""

    def get_queryset(self) -> QuerySet[Contract]:
        return visible_contracts(principal_of(self.request))

    @extend_schema(parameters=[EventsQuerySerializer], responses={200: EventsReportSerializer})
    def get(self, request: Request, code: str) -> Response:
        params = EventsQuerySerializer(data=request.query_params.dict())  # "?status=" is not "absent"
        params.is_valid(raise_exception=True)
        query: dict[str, Any] = params.validated_data
        contract = get_object_or_404(self.get_queryset().select_related("tenant", "package"), code=code)
        start, end = month_bounds(query.get("month") or month_of(timezone.now()))
        report = business_events(contract, start, end)
        wanted = query.get("status")
        events = [e for e in report.events if wanted is None or e.status == wanted]
        events.sort(key=lambda e: (e.package, e.event_id))
        body = {
            "contract": report.contract,
            "start": report.start,
            "end": report.end,
            "packages": report.packages,
            "events": events[: query["limit"]],
        }
        return Response(EventsReportSerializer(body).data)
