"""What an uploaded ONNX model is: checked with `onnx`, its inputs and outputs read off the graph, and
matched against the tensors the customer declares.

The opsets accepted are those the executors' onnxruntime (1.31) runs: 7 to 26 of the default domain.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from .errors import FactoryError, ModelTooLarge

MIN_OPSET = 7
MAX_OPSET = 26
DEFAULT_DOMAINS = ("", "ai.onnx")

DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.BOOL: "bool",
}
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES.values())

Shape = tuple[int | None, ...]  # None: a free dimension (symbolic or unknown), such as the batch


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: Shape

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class ModelSignature:
    sha256: str
    size: int
    opset: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


def inspect_model(data: bytes, max_bytes: int) -> ModelSignature:
    """The model's digest, opset, inputs and outputs; FactoryError naming what makes it unusable."""
    if len(data) > max_bytes:
        raise ModelTooLarge(
            "model_too_large",
            f"The model is {len(data)} bytes; the factory takes at most {max_bytes}.",
            {"size": len(data), "max_bytes": max_bytes},
        )
    try:
        model = onnx.load_model_from_string(data)
        onnx.checker.check_model(model)
    except (DecodeError, onnx.checker.ValidationError, ValueError) as error:
        raise FactoryError(
            "not_onnx", f"The file is not a valid ONNX model: {_first_line(error)}", {}
        ) from None
    if not model.graph.node:
        raise FactoryError("not_onnx", "The file is not a valid ONNX model: its graph has no node.", {})
    opset = _default_opset(model)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise FactoryError(
            "opset_unsupported",
            f"The model uses opset {opset}; the executors run opsets {MIN_OPSET} to {MAX_OPSET}.",
            {"opset": opset, "min_opset": MIN_OPSET, "max_opset": MAX_OPSET},
        )
    initialised = {init.name for init in model.graph.initializer}
    inputs = tuple(_tensor(v) for v in model.graph.input if v.name not in initialised)
    outputs = tuple(_tensor(v) for v in model.graph.output)
    return ModelSignature(hashlib.sha256(data).hexdigest(), len(data), opset, inputs, outputs)


def check_declared(side: str, declared: tuple[TensorSpec, ...], actual: tuple[TensorSpec, ...]) -> None:
    """The declared `side` ("inputs" or "outputs") must be the model's, tensor by tensor: the same names,
    element types and shapes (a free dimension matches only a free one)."""
    declared_names = [t.name for t in declared]
    actual_names = [t.name for t in actual]
    if sorted(declared_names) != sorted(actual_names):
        raise FactoryError(
            "schema_mismatch",
            f"The declared {side} are {declared_names}; the model's are {actual_names}.",
            {"side": side, "declared": declared_names, "model": actual_names},
        )
    model_tensors = {t.name: t for t in actual}
    for tensor in declared:
        found = model_tensors[tensor.name]
        if tensor.dtype != found.dtype:
            raise FactoryError(
                "schema_mismatch",
                f"{side} tensor {tensor.name!r} is declared {tensor.dtype}; the model's is {found.dtype}.",
                {"side": side, "tensor": tensor.name, "declared": tensor.dtype, "model": found.dtype},
            )
        if tensor.shape != found.shape:
            raise FactoryError(
                "schema_mismatch",
                f"{side} tensor {tensor.name!r} is declared with shape {_shape_text(tensor.shape)}; the "
                f"model's is {_shape_text(found.shape)}.",
                {
                    "side": side,
                    "tensor": tensor.name,
                    "declared": list(tensor.shape),
                    "model": list(found.shape),
                },
            )


def _default_opset(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    return max(versions, default=0)


def _tensor(value: onnx.ValueInfoProto) -> TensorSpec:
    kind = value.type.tensor_type
    dtype = DTYPES.get(kind.elem_type)
    if dtype is None:
        name = onnx.TensorProto.DataType.Name(kind.elem_type)
        raise FactoryError(
            "dtype_unsupported",
            f"Tensor {value.name!r} is {name}; the executors take {', '.join(DTYPE_NAMES)}.",
            {"tensor": value.name, "dtype": name, "supported": list(DTYPE_NAMES)},
        )
    dims = kind.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in dims)
    return TensorSpec(value.name, dtype, shape)


def _shape_text(shape: Shape) -> str:
    return "[" + ", ".join("free" if d is None else str(d) for d in shape) + "]"


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
