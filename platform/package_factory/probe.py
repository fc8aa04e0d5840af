"""The factory runs an uploaded model before building anything: on inputs of the declared shapes (a free
dimension taken as 1), with onnxruntime as the executors run it. A model that cannot run is refused; the
median time of one run is the capability's measured compute per event, which the base fee is quoted on."""

from __future__ import annotations

import statistics
import time
from decimal import Decimal

import numpy as np
import onnxruntime

from .errors import FactoryError
from .onnx_model import TensorSpec

RUNS = 21
NUMPY_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


def measure_seconds_per_event(model: bytes, inputs: tuple[TensorSpec, ...]) -> Decimal:
    """The median seconds of one run over RUNS runs (after one warm-up), to the microsecond."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    feed: dict[str, np.ndarray] = {
        t.name: np.zeros([d or 1 for d in t.shape], dtype=NUMPY_DTYPES[t.dtype]) for t in inputs
    }
    try:
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        session.run(None, feed)
        timings = []
        for _ in range(RUNS):
            started = time.perf_counter_ns()
            session.run(None, feed)
            timings.append(time.perf_counter_ns() - started)
    except Exception as error:  # onnxruntime raises its own exception types for every failure
        raise FactoryError(
            "model_failed",
            f"The model does not run on inputs of the declared shapes: {str(error).splitlines()[0][:300]}",
            {},
        ) from None
    median_ns = int(statistics.median(timings))
    return max(Decimal(median_ns) / Decimal(1_000_000_000), Decimal("0.000001")).quantize(Decimal("0.000001"))
