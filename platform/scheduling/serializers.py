"""The body of ``POST /v1/agents/scheduler-events``, validated: each event's fields within bounds, and a
refusal that names the first bad event's index and field."""

from __future__ import annotations

import math
import re
import time
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from common.errors import ApiError
from common.fields import StrictCharField
from treemeter_records.limits import SLUG_MAX
from treemeter_records.protocol import SCHEDULER_EVENTS_MAX
from treemeter_records.validation import UUID7_PATTERN

from .models import EXECUTORS_MAX, REASON_MAX, SchedulerEvent
from .services import EventInput

SLUG = r"[a-z0-9][a-z0-9._-]{0,63}"
SLUG_PATTERN = rf"^{SLUG}\Z"
EXECUTORS_PATTERN = rf"^({SLUG}(,{SLUG})*)?\Z"
FIGURE_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")
FIGURES_MAX = 16
FIGURE_MAGNITUDE_MAX = 1e15
AT_NS_MIN = 946_684_800 * 10**9  # 2000-01-01T00:00:00Z: a monotonic clock sent by mistake is refused
AT_NS_MAX = 2**63 - 1
FUTURE_NS = 300 * 10**9  # an event may be at most 5 minutes ahead of the platform's clock
# The fields of an event, in the order a refusal looks for the first bad one.
EVENT_FIELDS = ("id", "kind", "at_ns", "subtree", "executor", "lender", "reason", "figures")


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: DRF's IntegerField also takes "12", 12.0 and true."""

    default_error_messages = {"not_an_integer": "Must be an integer."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        return int(super().to_internal_value(data))


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "number"},
        "maxProperties": FIGURES_MAX,
        "description": f"At most {FIGURES_MAX} numbers, by name ({FIGURE_KEY.pattern}).",
    }
)
class FiguresField(serializers.Field):
    """The figures behind a move: a JSON object of at most 16 finite numbers under short names."""

    default_error_messages = {
        "not_an_object": "Must be an object of numbers.",
        "too_many": f"At most {FIGURES_MAX} figures.",
        "bad_name": "Figure names are 1 to 32 of a-z, 0-9 and _, starting with a letter: {name!r}.",
        "not_a_number": "Figure {name!r} must be a number.",
        "out_of_range": f"Figure {{name!r}} must be finite and at most {FIGURE_MAGNITUDE_MAX:.0e} in size.",
    }

    def to_internal_value(self, data: Any) -> dict[str, int | float]:
        if not isinstance(data, dict):
            self.fail("not_an_object")
        if len(data) > FIGURES_MAX:
            self.fail("too_many")
        figures: dict[str, int | float] = {}
        for name, value in data.items():
            if not isinstance(name, str) or FIGURE_KEY.match(name) is None:
                self.fail("bad_name", name=str(name)[:40])
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail("not_a_number", name=name)
            if not math.isfinite(value) or abs(value) > FIGURE_MAGNITUDE_MAX:
                self.fail("out_of_range", name=name)
            figures[name] = value
        return figures

    def to_representation(self, value: Any) -> Any:
        return value


def _text(pattern: str, max_length: int, **kwargs: Any) -> StrictCharField:
    # As a constructor argument: DRF copies a serializer's fields by calling them again with their
    # arguments, so a validator appended to the instance afterwards would be lost in the copy.
    validator = RegexValidator(pattern, message=f"Must match {pattern}.")
    return StrictCharField(max_length=max_length, trim_whitespace=False, validators=[validator], **kwargs)


class SchedulerEventSerializer(serializers.Serializer):
    id = _text(
        rf"^{UUID7_PATTERN}\Z", 36, help_text="The router's UUIDv7 for the event (lowercase, canonical)."
    )
    kind = serializers.ChoiceField(choices=SchedulerEvent.Kind.values)
    at_ns = StrictIntegerField(
        min_value=AT_NS_MIN,
        max_value=AT_NS_MAX,
        help_text="When it happened, Unix nanoseconds (UTC); at most 5 minutes ahead of the platform.",
    )
    subtree = _text(SLUG_PATTERN, SLUG_MAX, help_text="The borrower, or the subtree scaled.")
    executor = _text(
        EXECUTORS_PATTERN,
        EXECUTORS_MAX,
        required=False,
        allow_blank=True,
        help_text="The executors lent or given back, comma-separated agent ids.",
    )
    lender = _text(
        SLUG_PATTERN, SLUG_MAX, required=False, allow_blank=True, help_text="The other subtree of a move."
    )
    reason = StrictCharField(max_length=REASON_MAX, trim_whitespace=False)
    figures = FiguresField(help_text="The numbers that triggered the move, by name.")

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(str(key)[:64] for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({unknown[0]: ["Unknown field."]}, code="unknown_field")
        return super().to_internal_value(data)

    def validate_at_ns(self, value: int) -> int:
        if value > time.time_ns() + FUTURE_NS:
            raise serializers.ValidationError("More than 5 minutes in the future.", code="in_the_future")
        return value


class SchedulerEventsSerializer(serializers.Serializer):
    events: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=SchedulerEventSerializer(), max_length=SCHEDULER_EVENTS_MAX
    )


class SchedulerEventsAnswerSerializer(serializers.Serializer):
    accepted = serializers.IntegerField(help_text="Events stored by this post.")
    duplicates = serializers.IntegerField(help_text="Events stored before with the same content.")


def validated_events(data: Any) -> list[EventInput]:
    """The post's events, or ApiError: 400 ``invalid_event`` naming the first bad event's ``index`` and
    ``field``, 400 ``too_many_events`` past SCHEDULER_EVENTS_MAX, 400 ``invalid_request`` for a body
    that is not ``{"events": [...]}``."""
    serializer = SchedulerEventsSerializer(data=data)
    if serializer.is_valid():
        return [_event(item) for item in serializer.validated_data["events"]]
    errors = serializer.errors
    found = errors.get("events") if isinstance(errors, dict) else None
    first = _first_bad_event(found)
    if first is not None:
        index, event_errors = first
        found_name = next((n for n in EVENT_FIELDS if n in event_errors), next(iter(event_errors)))
        messages = [str(m) for m in event_errors[found_name]]
        # An item that is not an object has no field to name: the event itself is what is wrong.
        name = "event" if found_name == api_settings.NON_FIELD_ERRORS_KEY else found_name
        raise ApiError(
            "invalid_event",
            f"Event {index}: {name}: {' '.join(messages)}",
            {
                "index": index,
                "field": name,
                "errors": {k: [str(m) for m in v] for k, v in event_errors.items()},
            },
        )
    # Past its max_length, the list answers {"non_field_errors": [...]} with the code "max_length".
    refusal = found.get(api_settings.NON_FIELD_ERRORS_KEY) if isinstance(found, dict) else None
    if isinstance(refusal, list) and any(getattr(m, "code", "") == "max_length" for m in refusal):
        raise ApiError(
            "too_many_events",
            f"A post holds at most {SCHEDULER_EVENTS_MAX} events; send the rest in another.",
            {"field": "events", "max_events": SCHEDULER_EVENTS_MAX},
        )
    raise ApiError("invalid_request", 'The body must be {"events": [...]}.', dict(errors))


def _first_bad_event(found: Any) -> tuple[int, dict[str, Any]] | None:
    """The lowest index among the events' errors and its errors by field, or None when the errors are
    not the events' own. DRF reports a nested list's errors by index (a dict of the bad items only); a
    top-level list serializer reports a list with an empty dict for each good item: both are read."""
    if isinstance(found, list):
        bad = [(index, item) for index, item in enumerate(found) if isinstance(item, dict) and item]
    elif isinstance(found, dict):
        bad = [(int(k), v) for k, v in found.items() if str(k).isdigit() and isinstance(v, dict) and v]
    else:
        return None
    return min(bad, key=lambda pair: pair[0]) if bad else None


def _event(item: dict[str, Any]) -> EventInput:
    return EventInput(
        id=item["id"],
        kind=item["kind"],
        at_ns=item["at_ns"],
        subtree=item["subtree"],
        reason=item["reason"],
        figures=item["figures"],
        executor=item.get("executor", ""),
        lender=item.get("lender", ""),
    )
