"""OpenSLO v1 import and export of a policy's objectives: one `kind: SLO` document per objective.

Each SLO has an inline ratio indicator whose good/total metric sources are `type: Treemeter` (the
spec names kind, layer and threshold), a calendar-month time window in the policy's zone, and
Occurrences or Timeslices budgeting. The credit ladder has no OpenSLO field: it travels in the
annotation `treemeter.io/credit-ladder` as JSON, so an export imports back to the same terms.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction

from .models import CreditStep, Objective, SlaPolicy, validate_time_zone

API_VERSION = "openslo/v1"
LADDER_ANNOTATION = "treemeter.io/credit-ladder"
METRIC_SOURCE = "Treemeter"
CALENDAR_START = "2020-01-01 00:00:00"


class OpenSloError(ValueError):
    """The YAML is not OpenSLO v1 SLOs we can take; the message says where."""


def _plain(value: Decimal) -> str:
    """150.000 → '150', 99.9000 → '99.9' (never '1.5E+2')."""
    return format(value.normalize(), "f")


def _fraction(percent: Decimal) -> float:
    return float(percent / 100)


def _percent(value: Any, where: str) -> Decimal:
    try:
        percent = Decimal(str(value)) * 100
    except (InvalidOperation, ValueError) as error:
        raise OpenSloError(f"{where}: {value!r} is not a number") from error
    return percent.normalize()


def _source(objective: Objective, select: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": objective.kind, "layer": objective.layer, "select": select}
    if objective.threshold_ms is not None:
        spec["thresholdMs"] = _plain(objective.threshold_ms)
    return {"metricSource": {"type": METRIC_SOURCE, "spec": spec}}


def slo_document(policy: SlaPolicy, objective: Objective, service: str) -> dict[str, Any]:
    target: dict[str, Any] = {"displayName": objective.name, "target": _fraction(objective.target_percent)}
    if objective.timeslice_minutes and objective.timeslice_target_percent is not None:
        target["timeSliceTarget"] = _fraction(objective.timeslice_target_percent)
        target["timeSliceWindow"] = f"{objective.timeslice_minutes}m"
    ladder = [
        {"below_percent": _plain(s.below_percent), "credit_percent": _plain(s.credit_percent)}
        for s in objective.credit_steps.all()
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "SLO",
        "metadata": {
            "name": objective.name,
            "displayName": f"{policy.name}: {objective.name}",
            "annotations": {LADDER_ANNOTATION: json.dumps(ladder)},
        },
        "spec": {
            "service": service,
            "indicator": {
                "metadata": {"name": objective.name},
                "spec": {
                    "ratioMetric": {
                        "counter": True,
                        "good": _source(objective, "good"),
                        "total": _source(objective, "eligible"),
                    }
                },
            },
            "timeWindow": [
                {
                    "duration": "1M",
                    "isRolling": False,
                    "calendar": {"startTime": CALENDAR_START, "timeZone": policy.time_zone},
                }
            ],
            "budgetingMethod": "Timeslices" if objective.timeslice_minutes else "Occurrences",
            "objectives": [target],
        },
    }


def export_policy(policy: SlaPolicy) -> str:
    """The policy's objectives as a multi-document OpenSLO v1 YAML stream."""
    service = policy.contract.code if policy.contract else policy.package.code  # type: ignore[union-attr]
    objectives = policy.objectives.prefetch_related("credit_steps")
    return yaml.safe_dump_all(
        [slo_document(policy, o, service) for o in objectives], sort_keys=False, allow_unicode=True
    )


def _get(data: Any, path: str) -> Any:
    node = data
    for key in path.split("."):
        if key.isdigit() and isinstance(node, list) and int(key) < len(node):
            node = node[int(key)]
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            raise OpenSloError(f"missing {path}")
    return node


def _parse(doc: Any, index: int) -> tuple[dict[str, Any], list[tuple[Decimal, Decimal]], str]:
    """(objective fields, ladder, time zone) of one SLO document."""
    where = f"document {index + 1}"
    if not isinstance(doc, dict) or doc.get("apiVersion") != API_VERSION or doc.get("kind") != "SLO":
        raise OpenSloError(f"{where}: expected apiVersion {API_VERSION} and kind SLO")
    try:
        source = _get(doc, "spec.indicator.spec.ratioMetric.good.metricSource")
        if source.get("type") != METRIC_SOURCE:
            raise OpenSloError(f"metricSource type must be {METRIC_SOURCE}")
        spec = source["spec"]
        window = _get(doc, "spec.timeWindow.0")
        if window.get("duration") != "1M" or window.get("isRolling") is not False:
            raise OpenSloError("the time window must be a calendar month (duration 1M, isRolling false)")
        zone = _get(window, "calendar.timeZone")
        target = _get(doc, "spec.objectives.0")
        fields: dict[str, Any] = {
            "name": _get(doc, "metadata.name"),
            "kind": spec.get("kind"),
            "layer": spec.get("layer", "e2e"),
            "threshold_ms": Decimal(spec["thresholdMs"]) if "thresholdMs" in spec else None,
            "target_percent": _percent(_get(target, "target"), "target"),
            "timeslice_minutes": None,
            "timeslice_target_percent": None,
        }
        method = _get(doc, "spec.budgetingMethod")
        if method == "Timeslices":
            slice_window = str(_get(target, "timeSliceWindow"))
            if not slice_window.endswith("m") or not slice_window[:-1].isdigit():
                raise OpenSloError(f"timeSliceWindow {slice_window!r}: use whole minutes, e.g. 5m")
            fields["timeslice_minutes"] = int(slice_window[:-1])
            fields["timeslice_target_percent"] = _percent(_get(target, "timeSliceTarget"), "timeSliceTarget")
        elif method != "Occurrences":
            raise OpenSloError(f"budgetingMethod {method!r}: use Occurrences or Timeslices")
        annotation = (doc["metadata"].get("annotations") or {}).get(LADDER_ANNOTATION, "[]")
        ladder = [(Decimal(s["below_percent"]), Decimal(s["credit_percent"])) for s in json.loads(annotation)]
    except OpenSloError as error:
        raise OpenSloError(f"{where}: {error}") from error
    except (KeyError, TypeError, AttributeError, InvalidOperation, json.JSONDecodeError) as error:
        raise OpenSloError(f"{where}: malformed SLO ({error!r})") from error
    return fields, ladder, zone


def import_policy(policy: SlaPolicy, text: str) -> list[Objective]:
    """Replace the policy's objectives (and its time zone) with those of an OpenSLO v1 YAML stream.

    All or nothing: any invalid document leaves the policy as it was.
    """
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise OpenSloError(f"not YAML: {error}") from error
    if not docs:
        raise OpenSloError("no SLO documents")
    parsed = [_parse(doc, i) for i, doc in enumerate(docs)]
    zones = {zone for _, _, zone in parsed}
    if len(zones) != 1:
        raise OpenSloError(f"all SLOs of a policy share one time zone, got {sorted(zones)}")
    zone = zones.pop()
    try:
        validate_time_zone(zone)
        with transaction.atomic():
            policy.time_zone = zone
            policy.save(update_fields=["time_zone"])
            policy.objectives.all().delete()
            created = []
            for fields, ladder, _ in parsed:
                objective = Objective(policy=policy, **fields)
                objective.full_clean()
                objective.save()
                for below, credit in ladder:
                    step = CreditStep(objective=objective, below_percent=below, credit_percent=credit)
                    step.full_clean()
                    step.save()
                created.append(objective)
    except ValidationError as error:
        raise OpenSloError(f"invalid objective: {'; '.join(error.messages)}") from error
    return created
