"""The torch engine: a real MoE forward pass, routing captured from the routers, the L2 expert cache."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import Qwen3MoeForCausalLM

from compute_agents.checkpoint import CheckpointError, chat_prompt, expert_file, read_manifest, sha3_file
from compute_agents.engine import PromptLayout, TorchEngine, expert_counts
from compute_agents.expert_cache import ExpertCache, ExpertIntegrityError
from tests.compute_agents.model_sizes import SIZES, greedy
from tests.compute_agents.publisher import trust

PROMPTS = ["the contract review clause party agreement", "患者 诊断 报告 hospital doctor nurse report"]


def independent_routing(engine: TorchEngine, prompt: str, generated: list[int]) -> torch.Tensor:
    """Run the whole sequence once more with output_router_logits=True and take the top-k ourselves."""
    ids = engine.tokenizer(prompt, return_tensors="pt")["input_ids"]
    full = torch.cat([ids, torch.tensor([generated], dtype=torch.long)], dim=1)[:, :-1]
    with torch.inference_mode():
        out = engine.model(full, output_router_logits=True)
    return torch.stack(
        [torch.topk(logits, SIZES.top_k, dim=-1).indices for logits in out.router_logits], dim=1
    )


@pytest.mark.parametrize("prompt", PROMPTS)
def test_captured_routing_matches_an_independent_recomputation(tiny_model: Path, prompt: str) -> None:
    engine = TorchEngine(tiny_model, trust=trust(tiny_model))
    generation = engine.generate(prompt, greedy(12))
    generated = engine.tokenizer(prompt)["input_ids"]
    tokens = generation.tokens_in + generation.tokens_out
    assert generation.routed.shape == (tokens - 1, SIZES.layers, SIZES.top_k)
    new_ids = engine.model.generate(
        engine.tokenizer(prompt, return_tensors="pt")["input_ids"], max_new_tokens=12, do_sample=False
    )[0, len(generated) :].tolist()
    again = independent_routing(engine, prompt, new_ids)
    assert expert_counts(generation.routed, SIZES.experts) == expert_counts(again, SIZES.experts)
    counts = expert_counts(generation.routed, SIZES.experts)
    for layer in range(SIZES.layers):
        per_layer = [c["tokens"] for c in counts if c["layer"] == layer]
        assert sum(per_layer) == (tokens - 1) * SIZES.top_k
    assert all(0 <= c["expert"] < SIZES.experts and c["tokens"] > 0 for c in counts)
    assert len({c["expert"] for c in counts}) > 1


def test_two_prompts_route_differently(tiny_model: Path) -> None:
    engine = TorchEngine(tiny_model, trust=trust(tiny_model))
    first, second = (expert_counts(engine.generate(p, greedy(8)).routed, SIZES.experts) for p in PROMPTS)
    assert first != second


def test_the_expert_cache_computes_what_the_full_model_computes(tiny_model: Path) -> None:
    reference = Qwen3MoeForCausalLM.from_pretrained(tiny_model, local_files_only=True).eval()
    engine = TorchEngine(tiny_model, trust=trust(tiny_model), cache_capacity=3, preheat=1)
    cached = engine.generate(PROMPTS[0], greedy(10))
    ids = engine.tokenizer(PROMPTS[0], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        full = reference.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False
        )
    assert cached.text == engine.tokenizer.decode(full[0, ids.shape[1] :], skip_special_tokens=True)
    assert cached.expert_cache_misses > 0 and cached.expert_cache_hits > 0
    assert all(len(resident) <= 3 for resident in engine.cache.resident)
    # The cache is the only home of expert weights: the checkpoint's merged tensors were dropped.
    assert not [name for name, _ in engine.model.named_parameters() if ".experts." in name]
    assert [name for name, _ in reference.named_parameters() if ".experts." in name]


def test_a_path_without_l2_neither_preheats_nor_writes_back(tiny_model: Path) -> None:
    engine = TorchEngine(tiny_model, trust=trust(tiny_model), cache_capacity=3, preheat=2)
    cached = engine.generate(PROMPTS[0], greedy(10))
    recent, preheated = list(engine.cache.recent), engine.cache.stats.preheat_loads
    direct = engine.generate(PROMPTS[1], greedy(10), use_l2=False)
    assert direct.l2_us == 0 and direct.l3_us > 0  # expert loads count in L3 on this path
    assert list(engine.cache.recent) == recent and engine.cache.stats.preheat_loads == preheated
    assert direct.expert_cache_hits + direct.expert_cache_misses > 0
    assert engine.generate(PROMPTS[0], greedy(10), use_l2=False).text == cached.text


def test_a_preheated_expert_is_not_the_next_victim(tiny_model: Path) -> None:
    cache = ExpertCache(tiny_model, read_manifest(tiny_model)["experts"], layers=SIZES.layers, capacity=2)
    cache.get(0, 0), cache.get(0, 0)  # expert 0: two uses
    cache.observe(Counter({(0, 1): 5}))
    assert cache.preheat(1) == 1  # expert 1 predicted and loaded: counted as two uses now
    cache.get(0, 2)  # a miss: the victim is expert 0 (older second use), not the preheated 1
    assert sorted(cache.resident[0]) == [1, 2]


def test_lru_k_evicts_the_expert_with_the_oldest_second_use(tiny_model: Path) -> None:
    cache = ExpertCache(tiny_model, read_manifest(tiny_model)["experts"], layers=SIZES.layers, capacity=2)
    for expert in (0, 0, 1, 1, 0):  # expert 0: uses at t1,t2,t5; expert 1: t3,t4
        cache.get(0, expert)
    cache.get(0, 2)  # evicts the one whose 2nd-most-recent use is oldest: expert 0 (t2 < t3)
    assert sorted(cache.resident[0]) == [1, 2]
    cache.get(0, 3)  # expert 2 was used once: infinite K-distance, evicted first
    assert sorted(cache.resident[0]) == [1, 3]
    assert (cache.stats.hits, cache.stats.misses) == (3, 4)


def test_preheat_loads_the_experts_recent_routing_predicts(tiny_model: Path) -> None:
    engine = TorchEngine(tiny_model, trust=trust(tiny_model), cache_capacity=4, preheat=2)
    engine.generate(PROMPTS[0], greedy(6))
    predicted = engine.cache.predicted(2)
    for layer in range(SIZES.layers):
        engine.cache.resident[layer].clear()
    assert engine.cache.preheat(2) == len(predicted) == 2 * SIZES.layers
    assert all(expert in engine.cache.resident[layer] for layer, expert in predicted)


def test_a_corrupted_expert_file_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_model, copy)
    engine = TorchEngine(copy, trust=trust(copy), cache_capacity=2, preheat=0)
    victim = expert_file(copy, 0, int(engine.generate(PROMPTS[0], greedy(2)).routed[0, 0, 0]))
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    alerts: list[tuple[int, int, str]] = []
    fresh = TorchEngine(
        copy, trust=trust(copy), cache_capacity=2, preheat=0, on_integrity_error=lambda *a: alerts.append(a)
    )
    with pytest.raises(ExpertIntegrityError, match="does not match the manifest"):
        fresh.generate(PROMPTS[0], greedy(2))
    assert alerts and alerts[0][2] == str(victim)


def test_corrupted_weights_are_refused_at_load(tiny_model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_model, copy)
    before = sha3_file(copy / "model.safetensors")
    with (copy / "model.safetensors").open("ab") as handle:
        handle.write(b"\0")
    assert sha3_file(copy / "model.safetensors") != before
    with pytest.raises(CheckpointError, match="refusing to load"):
        TorchEngine(copy, trust=trust(copy))


def test_the_engine_reports_the_checkpoint_fingerprint(tiny_model: Path) -> None:
    engine = TorchEngine(tiny_model, trust=trust(tiny_model))
    assert (
        engine.weights_sha3
        == sha3_file(tiny_model / "model.safetensors")
        == read_manifest(tiny_model)["weights_sha3"]
    )
    assert (engine.moe_layers, engine.num_experts, engine.top_k) == (SIZES.layers, SIZES.experts, SIZES.top_k)


def test_both_engines_lay_out_and_count_prompts_with_one_shared_code(tiny_model: Path) -> None:
    from compute_agents.vllm_engine import VllmEngine  # importable without vllm: it loads it on start

    for method in ("chat_prompt", "count_tokens"):
        assert getattr(TorchEngine, method) is getattr(PromptLayout, method) is getattr(VllmEngine, method)
    engine = TorchEngine(tiny_model, trust=trust(tiny_model))
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the contract"}]
    prompt = engine.chat_prompt(messages)
    assert prompt == chat_prompt(messages) == "<|system|>\nbe brief\n<|user|>\nthe contract\n<|assistant|>\n"
    ids = engine.tokenizer(prompt)["input_ids"]
    assert engine.count_tokens(prompt) == len(ids)
    roles = engine.tokenizer.convert_tokens_to_ids(["<|system|>", "<|user|>", "<|assistant|>"])
    assert [i for i in ids if i in roles] == roles  # each role marker is one special token
