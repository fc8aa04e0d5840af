"""GET /v1/ledger/agents/<agent id>/completeness (staff): the seq ranges an agent's batches covered in a
window and the gaps still open. Routed from config.urls under the ledger's prefix, as before."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ledger.api import AwareDateTimeField, answers_errors, query_params, seq_ranges

from . import selectors


class AgentCompletenessSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    batches = serializers.IntegerField()
    first_seq = serializers.IntegerField(required=False)
    last_seq = serializers.IntegerField(required=False)
    ranges = seq_ranges("[first, last] seq ranges received.")
    gaps = seq_ranges("[first, last] seq ranges still missing.")
    missing = serializers.IntegerField(required=False)
    complete = serializers.BooleanField()


class WindowQuery(serializers.Serializer):
    start = AwareDateTimeField(help_text="ISO 8601 with an offset.")
    end = AwareDateTimeField(help_text="ISO 8601 with an offset; exclusive.")


class CompletenessView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(parameters=[WindowQuery], responses={200: AgentCompletenessSerializer})
    @answers_errors
    def get(self, request: Request, agent_id: str) -> Response:
        window = query_params(WindowQuery, request)
        report = selectors.completeness_report(agent_id, window["start"], window["end"])
        return Response(AgentCompletenessSerializer(report).data)
