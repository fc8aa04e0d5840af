"""``POST /v1/agents/scheduler-events`` (treemeter_records.protocol.SCHEDULER_EVENTS_PATH): an L1 router's
scheduler events. Thin: the signature is checked by agents.signed_requests, the body by
scheduling.serializers, the events stored by scheduling.services."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.signed_requests import SIGNATURE_HEADERS, signed_agent_key

from .serializers import SchedulerEventsAnswerSerializer, SchedulerEventsSerializer, validated_events
from .services import ensure_router, record_scheduler_events


class SchedulerEventsView(APIView):
    """A router's scheduler events (borrows, returns, scaling steps), signed like every agent request.

    401 ``bad_request_signature``/``stale_request`` for a request not signed by an active agent key;
    403 ``not_a_router`` for an agent that is not an L1 router; 400 ``invalid_event`` naming the first bad
    event's ``index`` and ``field``, ``too_many_events`` past the protocol's bound; 409 ``event_conflict``
    naming the ``id`` of an event stored before with other content. The post is one transaction: all of
    its events are stored, or none.

    A retry is safe: events stored before with the same content count as ``duplicates`` and nothing is
    stored twice, so resending a post whose answer was lost answers ``{"accepted": 0, "duplicates": n}``
    (a partly new post stores only the new events). A retry never gets 409 unless the router changed an
    event under an id it had already sent."""

    authentication_classes: list[Any] = []  # the request's signature is the authentication
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []  # as the lease endpoints: bounded by the signature and the body

    @extend_schema(
        operation_id="agents_scheduler_events_create",
        request=SchedulerEventsSerializer,
        responses={200: SchedulerEventsAnswerSerializer},
        parameters=SIGNATURE_HEADERS,
        auth=[],
    )
    def post(self, request: Request) -> Response | JsonResponse:
        agent_key = signed_agent_key(request._request)
        if isinstance(agent_key, JsonResponse):
            return agent_key
        ensure_router(agent_key.agent)
        answer = record_scheduler_events(router=agent_key.agent, events=validated_events(request.data))
        return Response(SchedulerEventsAnswerSerializer(answer).data)
