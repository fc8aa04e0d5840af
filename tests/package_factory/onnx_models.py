"""Tiny ONNX models the factory tests upload, built here with onnx.helper (nothing downloaded)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHTS = np.arange(8, dtype=np.float32).reshape(4, 2) / 10
BIAS = np.array([0.5, -0.5], dtype=np.float32)


def linear_model(
    *, features: int = 4, opset: int = 17, batch: str | None = "batch", graph_name: str = "linear"
) -> bytes:
    """y = x @ W + b: x float32 [batch, features], y float32 [batch, 2]; `graph_name` makes the file's
    digest its own."""
    weights = np.resize(WEIGHTS, (features, 2)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        graph_name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def unchecked_model(opset: int) -> bytes:
    """A one-node model stamped with any opset (onnx's checker would refuse one it does not know)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = onnx.IR_VERSION
    return model.SerializeToString()


LINEAR_INPUTS = [{"name": "x", "dtype": "float32", "shape": [None, 4]}]
LINEAR_OUTPUTS = [{"name": "y", "dtype": "float32", "shape": [None, 2]}]
