"""The demo's package built by the package factory: Acme Legal turns a small ONNX model into its own
insurance-claim package (package_factory.services.build_package, as the portal's form does)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from accounts.access import Principal
from accounts.models import Role, Tenant
from package_factory.models import PackageBuild
from package_factory.services import build_package

from .services import HOST_CLASS

PACKAGE = "acme-claims"
FEATURES = 16


def claim_scorer() -> bytes:
    """scores = softmax(x @ W + b): x float32 [batch, 16] → scores float32 [batch, 4], fixed weights."""
    weights = (np.arange(FEATURES * 4, dtype=np.float32).reshape(FEATURES, 4) % 7 - 3) / 10
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["scores"], axis=-1),
        ],
        "claim-scorer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(np.zeros(4, np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model.SerializeToString()


def build_demo_package(tenant_code: str) -> PackageBuild:
    """The tenant's factory-built package (built once; later runs return the first build)."""
    existing = PackageBuild.objects.filter(package__code=PACKAGE).first()
    if existing is not None:
        return existing
    tenant = Tenant.objects.get(code=tenant_code)
    declaration = {
        "package": {"code": PACKAGE, "name": "Acme claim documents 理赔单据"},
        "capability": {
            "code": f"{PACKAGE}-scorer",
            "name": "Claim field scorer",
            "inputs": [{"name": "x", "dtype": "float32", "shape": [None, FEATURES]}],
            "outputs": [{"name": "scores", "dtype": "float32", "shape": [None, 4]}],
        },
        "host_class": HOST_CLASS,
    }
    owner = Principal(tenant=tenant, role=Role.OWNER, user_id=None)
    return build_package(owner, declaration, claim_scorer(), template_code="insurance-claim-documents")
