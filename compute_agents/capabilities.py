"""One call of an ONNX capability (``POST /v1/capabilities/{code}/invocations``): who may call it, its
inputs, the quota it holds, the run on onnxruntime (``onnx_executor``), and its record.

The key's package must be one of the capability's and its ``models`` (if any) must hold the capability's model
id; otherwise, as for a code nobody configured, the answer is 404 ``model_not_found`` and the record names
no model, so a refusal never tells that another package's capability exists. Every call of an
authenticated key leaves a record, on the path L1→L3→L1 (L3: the onnxruntime run), counting items for
tokens (``tokens_in``: the first input's batch size, ``tokens_out``: the first output's): ``ok``;
``rejected`` (unknown capability, bad inputs, a capability its gray release does not turn on or above
its hourly cap, quota; nothing counted); ``timeout`` (504, the items in
and no output); ``error`` (500, the same). Only ``ok`` is billed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from .admission import Admission
from .entitlements import Entitlement, Reservation
from .metering import Meter, Trip, Usage
from .onnx_executor import Capability, CapabilityTimeout, InvalidInput, OnnxExecutor
from .wire import ApiError, new_client_request_id

log = structlog.get_logger("compute_agents.capabilities")

ROUTE = "/v1/capabilities/{code}/invocations"
PATH = ("L1", "L3", "L1")
BODY_FIELDS = frozenset({"inputs", "event_id"})


@dataclass(frozen=True)
class UnknownModel:
    """What a refused call's record names as its model: nothing that tells which capabilities exist."""

    model_id: str = "unknown"
    weights_sha3: str = "0" * 64


def capability_not_found(code: str) -> ApiError:
    return ApiError(
        404,
        "invalid_request_error",
        "model_not_found",
        f"The capability `{code}` does not exist or you do not have access to it.",
    )


def invalid_input(param: str, message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", "invalid_input", message, param)


class CapabilityService:
    def __init__(self, executor: OnnxExecutor, admission: Admission, meter: Meter) -> None:
        self.executor = executor
        self.admission = admission
        self.meter = meter

    def invoke(self, trip: Trip, entitlement: Entitlement, code: str, body: Any) -> dict[str, Any]:
        """Serve an authenticated call: ``{capability, outputs, items}``, the outputs as numpy arrays
        (the caller writes them as JSON lists). Every outcome leaves a record (the module docstring)."""
        capability, feeds, reservation = self._admit(trip, entitlement, code, body)
        items = capability.items_in(feeds)
        spent = 0
        try:
            try:
                ran = self.executor.run(capability, feeds)
            except CapabilityTimeout as timeout:
                usage = Usage(tokens_in=items, l3_us=timeout.waited_us)
                self.meter.record_usage(trip, entitlement, usage, "timeout", PATH, model=capability)
                raise ApiError(
                    504,
                    "server_error",
                    "capability_timeout",
                    f"The capability `{code}` did not answer within {capability.timeout_ms} ms.",
                ) from None
            except Exception as error:  # onnxruntime's own failures
                log.exception("capability_failure", capability=code, error=str(error))
                self.meter.record_usage(
                    trip, entitlement, Usage(tokens_in=items), "error", PATH, model=capability
                )
                raise ApiError(
                    500, "server_error", "capability_error", "The capability failed on this call."
                ) from None
            usage = Usage(
                tokens_in=items, tokens_out=capability.items_out(ran.outputs), l3_us=ran.run_us, ran=True
            )
            record = self.meter.record_usage(
                trip, entitlement, usage, "ok", PATH, reservation=reservation, model=capability
            )
            spent = record["tokens_in"] + record["tokens_out"]
        finally:
            self.admission.quota.release(reservation, spent)
        return {"capability": capability.code, "outputs": ran.outputs, "items": items}

    def _admit(
        self, trip: Trip, entitlement: Entitlement, code: str, body: Any
    ) -> tuple[Capability, dict[str, np.ndarray[Any, Any]], Reservation]:
        """Access, inputs, gray release, quota; a refusal leaves a ``rejected`` record."""
        capability = self.executor.capabilities.get(code)
        if capability is not None and (
            entitlement.package not in capability.packages or not entitlement.reaches(capability.model_id)
        ):
            capability = None  # another package's capability is as unknown as none
        try:
            if capability is None:
                raise capability_not_found(code)
            feeds = self._feeds(trip, capability, body)
            reservation = self.admission.reserve_released(
                entitlement, capability.model_id, capability.most_items(feeds), trip.start_ns
            )
        except ApiError:
            self.meter.record_usage(
                trip, entitlement, Usage(), "rejected", ("L1",), model=capability or UnknownModel()
            )
            raise
        trip.admitted()
        return capability, feeds, reservation

    @staticmethod
    def _feeds(trip: Trip, capability: Capability, body: Any) -> dict[str, np.ndarray[Any, Any]]:
        """The body ``{"inputs": {name: array}, "event_id": "…"}`` checked; the event id, when given, is
        the record's ``client_request_id``."""
        if not isinstance(body, dict):
            raise invalid_input("inputs", "The body must be a JSON object with `inputs`.")
        for name in body:
            if name not in BODY_FIELDS:
                raise invalid_input(str(name), f"Unknown field `{name}`: a call has `inputs` and `event_id`.")
        event_id = body.get("event_id")
        if event_id is not None:
            if not isinstance(event_id, str):
                raise invalid_input("event_id", "`event_id` must be a string.")
            trip.client_request_id = new_client_request_id(event_id, trip.record_id)
        try:
            return capability.feeds(body.get("inputs"))
        except InvalidInput as invalid:
            raise invalid_input(invalid.param, str(invalid)) from None
