"""ONNX capabilities: the models of a compute package that the platform's package factory builds, run by
onnxruntime on the CPU.

The executor config (JSON, written by the factory; ``serve --onnx-config``) names each capability's code,
model id, package (or ``packages``, for a capability several packages share), artifact (its file,
relative to the config's directory, and the file's SHA-256), declared inputs and outputs (name, dtype,
shape with ``null`` for a free dimension) and timeout. At start every artifact is read once, hashed and
loaded from those very bytes; a file whose digest, or a model whose inputs or outputs, differ from the
config is refused (``CapabilityConfigError``). A call's inputs are checked against the declaration
(``InvalidInput`` names the input), then run in a worker thread that is waited for at most the
capability's timeout (``CapabilityTimeout``; the run is told to stop).
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from treemeter_records.limits import TEXT_MAX
from treemeter_records.validation import is_slug

DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
ONNX_TENSOR_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(bool)": "bool",
}
# The numpy kinds of JSON arrays each dtype takes: integers widen to floats, nothing narrows.
CASTABLE_KINDS = {"float32": "if", "float64": "if", "int32": "i", "int64": "i", "bool": "b"}

Shape = tuple[int | None, ...]  # None: a free dimension (the batch, say)


class CapabilityConfigError(ValueError):
    """The executor config, or an artifact it names, cannot be served: the agent does not start."""


class InvalidInput(ValueError):
    """A call's inputs do not match the capability's declaration; ``param`` names the input."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class CapabilityTimeout(TimeoutError):
    """The run outlasted the capability's timeout; ``waited_us`` is how long it was waited for."""

    def __init__(self, waited_us: int) -> None:
        super().__init__(f"no answer after {waited_us} µs")
        self.waited_us = waited_us


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: Shape

    @classmethod
    def parse(cls, entry: Any, where: str) -> TensorSpec:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise CapabilityConfigError(f"{where}: each tensor is {{name, dtype, shape}}")
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if dtype not in DTYPES:
            raise CapabilityConfigError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if not isinstance(shape, list) or not all(d is None or (type(d) is int and d >= 0) for d in shape):
            raise CapabilityConfigError(f"{where}: shape must be a list of sizes and nulls (free)")
        return cls(entry["name"], dtype, tuple(shape))

    @classmethod
    def of_model(cls, arg: Any) -> TensorSpec:
        """What onnxruntime says of one of the model's inputs or outputs (a ``NodeArg``)."""
        shape = tuple(d if isinstance(d, int) else None for d in arg.shape)
        return cls(arg.name, ONNX_TENSOR_TYPES.get(arg.type, arg.type), shape)

    def array(self, value: Any) -> np.ndarray[Any, Any]:
        """``value`` (nested JSON lists) as this input's array, or InvalidInput."""
        param = f"inputs.{self.name}"
        try:
            array = np.array(value)
        except (ValueError, OverflowError):
            raise InvalidInput(param, f"input {self.name!r} must be a rectangular array") from None
        if array.size and array.dtype.kind not in CASTABLE_KINDS[self.dtype]:
            raise InvalidInput(param, f"input {self.name!r} holds values that are not {self.dtype}")
        if len(array.shape) != len(self.shape) or any(
            size is not None and size != given for size, given in zip(self.shape, array.shape, strict=True)
        ):
            raise InvalidInput(
                param,
                f"input {self.name!r} has shape {list(array.shape)}; the capability takes "
                f"{json.dumps(list(self.shape))} (null: any size)",
            )
        target = DTYPES[self.dtype]
        if array.size and target.kind == "i":
            limits = np.iinfo(target)
            if array.min() < limits.min or array.max() > limits.max:
                raise InvalidInput(param, f"input {self.name!r} holds values out of {self.dtype}'s range")
        return array.astype(target)

    def items(self, array: np.ndarray[Any, Any]) -> int:
        """The size of the first free (batch) dimension; 1 when every dimension is fixed."""
        return next((array.shape[i] for i, size in enumerate(self.shape) if size is None), 1)


@dataclass(frozen=True)
class Capability:
    code: str
    model_id: str
    packages: frozenset[str]  # the packages whose keys may call it (shared capabilities: several)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    timeout_ms: int
    weights_sha3: str  # the SHA3-256 of the artifact's bytes: the records' weights fingerprint
    session: ort.InferenceSession = field(compare=False, repr=False)

    def feeds(self, given: Any) -> dict[str, np.ndarray[Any, Any]]:
        """The call's ``inputs`` object as onnxruntime's feeds: every declared input, nothing else."""
        if not isinstance(given, dict):
            raise InvalidInput("inputs", "inputs must be an object of input name → array")
        declared = {spec.name: spec for spec in self.inputs}
        for name in given:
            if name not in declared:
                raise InvalidInput(f"inputs.{name}", f"the capability has no input {name!r}")
        for name in declared:
            if name not in given:
                raise InvalidInput(f"inputs.{name}", f"input {name!r} is required")
        return {name: spec.array(given[name]) for name, spec in declared.items()}

    def items_in(self, feeds: dict[str, np.ndarray[Any, Any]]) -> int:
        """The call's size: the first free dimension of the first input (1 without one)."""
        return self.inputs[0].items(feeds[self.inputs[0].name]) if self.inputs else 1

    def items_out(self, outputs: dict[str, np.ndarray[Any, Any]]) -> int:
        first = self.outputs[0]
        return first.items(outputs[first.name])

    def most_items(self, feeds: dict[str, np.ndarray[Any, Any]]) -> int:
        """What a call may count, for the quota it holds while it runs: its items in, and as many out
        when the first output has a free (batch) dimension, else one."""
        items_in = self.items_in(feeds)
        return items_in + (items_in if None in self.outputs[0].shape else 1)


@dataclass(frozen=True)
class Ran:
    outputs: dict[str, np.ndarray[Any, Any]]
    run_us: int  # onnxruntime's run alone


class OnnxExecutor:
    """The capabilities of one config, each an onnxruntime session, run by a pool of worker threads."""

    def __init__(self, capabilities: dict[str, Capability], workers: int = 4) -> None:
        self.capabilities = capabilities
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="onnx")

    @classmethod
    def from_config(cls, path: Path, workers: int = 4) -> OnnxExecutor:
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise CapabilityConfigError(f"{path}: {error}") from None
        entries = config.get("capabilities") if isinstance(config, dict) else None
        if not isinstance(entries, list):
            raise CapabilityConfigError(f'{path}: the config is {{"capabilities": [...]}}')
        capabilities: dict[str, Capability] = {}
        for index, entry in enumerate(entries):
            capability = load_capability(entry, path.parent, f"{path}: capabilities[{index}]")
            if capability.code in capabilities:
                raise CapabilityConfigError(f"{path}: capability {capability.code!r} is configured twice")
            capabilities[capability.code] = capability
        return cls(capabilities, workers)

    def run(self, capability: Capability, feeds: dict[str, np.ndarray[Any, Any]]) -> Ran:
        """Run in a worker thread, waiting at most the capability's timeout; past it the run is told to
        stop (onnxruntime checks between kernels) and ``CapabilityTimeout`` raised."""
        options = ort.RunOptions()
        mark = time.perf_counter_ns()
        future = self._pool.submit(_run, capability, feeds, options)
        try:
            return future.result(timeout=capability.timeout_ms / 1000)
        except TimeoutError:
            options.terminate = True
            raise CapabilityTimeout((time.perf_counter_ns() - mark) // 1000) from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _run(capability: Capability, feeds: dict[str, np.ndarray[Any, Any]], options: ort.RunOptions) -> Ran:
    names = [spec.name for spec in capability.outputs]
    mark = time.perf_counter_ns()
    values = capability.session.run(names, feeds, options)
    return Ran(dict(zip(names, values, strict=True)), (time.perf_counter_ns() - mark) // 1000)


def load_capability(entry: Any, directory: Path, where: str) -> Capability:
    """One capability of the config: its artifact checked against its digest, loaded, and its inputs and
    outputs checked against the declared ones."""
    if not isinstance(entry, dict):
        raise CapabilityConfigError(f"{where}: each capability is an object")
    code, model_id = entry.get("code"), entry.get("model")
    packages = entry.get("packages", [entry.get("package")])
    artifact, timeout_ms = entry.get("artifact"), entry.get("timeout_ms")
    if not is_slug(code) or not isinstance(packages, list) or not packages or not all(map(is_slug, packages)):
        raise CapabilityConfigError(
            f"{where}: code and package (or each of packages) must be slugs ([a-z0-9][a-z0-9._-]*)"
        )
    if not isinstance(model_id, str) or not 0 < len(model_id) <= TEXT_MAX:
        raise CapabilityConfigError(f"{where}: model must be a model id")
    if type(timeout_ms) is not int or timeout_ms < 1:
        raise CapabilityConfigError(f"{where}: timeout_ms must be a whole number of milliseconds, ≥ 1")
    if not isinstance(artifact, dict) or not all(
        isinstance(artifact.get(k), str) for k in ("path", "sha256")
    ):
        raise CapabilityConfigError(f"{where}: artifact is {{path, sha256}}")
    inputs = _specs(entry.get("inputs"), f"{where}.inputs")
    outputs = _specs(entry.get("outputs"), f"{where}.outputs")
    if not outputs:
        raise CapabilityConfigError(f"{where}: a capability has at least one output")
    file = directory / artifact["path"]
    try:
        data = file.read_bytes()
    except OSError as error:
        raise CapabilityConfigError(f"{where}: cannot read the artifact: {error}") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != artifact["sha256"].lower():
        raise CapabilityConfigError(
            f"{where}: {file} has SHA-256 {digest}, not the configured {artifact['sha256']}"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own exception types, for a file it cannot load
        raise CapabilityConfigError(f"{where}: onnxruntime cannot load {file}: {error}") from None
    for side, declared, actual in (
        ("inputs", inputs, session.get_inputs()),
        ("outputs", outputs, session.get_outputs()),
    ):
        model_side = {spec.name: spec for spec in map(TensorSpec.of_model, actual)}
        if {spec.name: spec for spec in declared} != model_side:
            raise CapabilityConfigError(
                f"{where}: the model's {side} {_described(model_side.values())} differ from the "
                f"configured {_described(declared)}"
            )
    return Capability(
        entry["code"],  # the slugs checked above
        model_id,
        frozenset(packages),
        inputs,
        outputs,
        timeout_ms,
        hashlib.sha3_256(data).hexdigest(),
        session,
    )


def _specs(value: Any, where: str) -> tuple[TensorSpec, ...]:
    if not isinstance(value, list):
        raise CapabilityConfigError(f"{where} must be a list of tensors")
    return tuple(TensorSpec.parse(entry, where) for entry in value)


def _described(specs: Any) -> str:
    return ", ".join(f"{s.name}: {s.dtype}{json.dumps(list(s.shape))}" for s in specs) or "none"
