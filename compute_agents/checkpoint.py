"""A tiny random-weight Qwen3-MoE checkpoint made locally (nothing comes from a hub), and its fingerprints.

Layout of a checkpoint directory:

- ``config.json``, ``model.safetensors``, tokenizer files: a normal Hugging Face checkpoint.
- ``experts/L{layer}-E{expert}.safetensors``: one file per expert (``gate_up_proj``, ``down_proj``),
  which the L2 expert cache loads on demand.
- ``treemeter.json``: the manifest: SHA3-256 of ``model.safetensors`` (the record's ``weights_sha3``)
  and of every expert file (``experts``). A file that does not match its fingerprint is refused.
  Each expert file is also fingerprinted in blocks of ``block_bytes`` (64 KiB; the last may be shorter):
  ``expert_blocks`` holds the SHA3-256 of each block and ``expert_bytes`` the file's length. The
  whole-file hash stays the check of record; the blocks only say where a refused file is damaged
  (which block first, how many, whether it was truncated or extended). A manifest written before the
  blocks has neither key: its refusals name no block.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

MANIFEST = "treemeter.json"
BLOCK_BYTES = 65_536  # expert files are fingerprinted in blocks of this size too, to locate damage
TINY_ALIAS = "tiny"
WEIGHTS_FILE = "model.safetensors"
EXPERTS_DIR = "experts"
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>"]
EOS_TOKEN = "<|endoftext|>"  # noqa: S105 - a token, not a password


def chat_prompt(messages: list[dict[str, str]]) -> str:
    """The tiny model's chat layout: one role token per turn, ending where the assistant speaks."""
    turns = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(turns) + "<|assistant|>\n"


_CORPUS_WORDS = [
    "the",
    "contract",
    "review",
    "clause",
    "party",
    "agreement",
    "term",
    "notice",
    "payment",
    "invoice",
    "liability",
    "indemnity",
    "patient",
    "record",
    "diagnosis",
    "treatment",
    "hospital",
    "doctor",
    "nurse",
    "report",
    "expert",
    "router",
    "layer",
    "token",
    "cache",
    "latency",
    "request",
    "response",
    "model",
    "mixture",
    "experts",
    "gate",
    "weight",
    "tenant",
    "package",
    "service",
    "level",
    "合同",
    "审查",
    "条款",
    "付款",
    "发票",
    "责任",
    "医院",
    "患者",
    "诊断",
    "报告",
    "专家",
    "路由",
    "缓存",
    "延迟",
    "请求",
    "模型",
    "租户",
    "服务",
    "等级",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "hundred",
    "thousand",
    "million",
    "a",
    "an",
    "of",
    "to",
    "in",
    "on",
    "for",
    "with",
    "by",
    "from",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "has",
    "have",
    "had",
    "will",
    "shall",
    "may",
    "must",
    "not",
    "and",
    "or",
    "but",
    "if",
    "then",
]


class CheckpointError(RuntimeError):
    """A checkpoint file is missing or does not match its fingerprint."""


@dataclass(frozen=True)
class TinySizes:
    hidden: int = 128
    layers: int = 4
    experts: int = 16
    top_k: int = 2
    moe_intermediate: int = 64
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 1024


def sha3_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha3_256").hexdigest()


def sha3_blocks(data: bytes, block_bytes: int = BLOCK_BYTES) -> list[str]:
    """SHA3-256 of each consecutive ``block_bytes`` slice of ``data`` (the last may be shorter)."""
    view = memoryview(data)
    return [
        hashlib.sha3_256(view[start : start + block_bytes]).hexdigest()
        for start in range(0, len(data), block_bytes)
    ]


@dataclass(frozen=True)
class BlockDamage:
    """Where the bytes read of a file differ from its block fingerprints."""

    block: int  # the first damaged block
    damaged_blocks: int  # blocks that differ, counting those missing from the read or from the manifest
    block_bytes: int
    size: int  # bytes read
    expected_size: int  # the manifest's

    @property
    def byte_range(self) -> tuple[int, int]:
        """The first damaged block's first and last byte, in the longer of the file read and the file
        fingerprinted (a block cut short by a truncation keeps its whole range)."""
        start = self.block * self.block_bytes
        return start, min(start + self.block_bytes, max(self.size, self.expected_size)) - 1

    @property
    def resized_from(self) -> int | None:
        """The block from which the file is truncated or extended; None when its length is right."""
        if self.size == self.expected_size:
            return None
        return min(self.size, self.expected_size) // self.block_bytes


@dataclass(frozen=True)
class ExpertBlocks:
    """The manifest's block fingerprints of the expert files, keyed ``"layer/expert"``."""

    block_bytes: int
    hashes: dict[str, list[str]]
    sizes: dict[str, int]

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> ExpertBlocks | None:
        """None for a manifest written before expert files were fingerprinted in blocks."""
        if "expert_blocks" not in manifest:
            return None
        return cls(int(manifest["block_bytes"]), manifest["expert_blocks"], manifest["expert_bytes"])

    def damage(self, key: str, data: bytes) -> BlockDamage | None:
        """Where ``data``, read for the expert ``key``, differs from its blocks; None when the manifest has
        no blocks for it or they all match."""
        expected = self.hashes.get(key)
        if expected is None:
            return None
        read = sha3_blocks(data, self.block_bytes)
        damaged = [i for i, (got, want) in enumerate(zip_longest(read, expected)) if got != want]
        if not damaged:
            return None
        return BlockDamage(damaged[0], len(damaged), self.block_bytes, len(data), self.sizes[key])


def expert_file(directory: Path, layer: int, expert: int) -> Path:
    return directory / EXPERTS_DIR / f"L{layer}-E{expert}.safetensors"


def _corpus(lines: int = 4000) -> list[str]:
    """A deterministic synthetic corpus to train the tokenizer on."""
    import random

    rng = random.Random(1234)  # noqa: S311 - tokenizer training text, not secrets
    return [" ".join(rng.choices(_CORPUS_WORDS, k=rng.randint(4, 16))) for _ in range(lines)]


def train_tokenizer(vocab: int) -> Any:
    """A byte-level BPE tokenizer trained locally with `tokenizers` (any input text is encodable)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def create_tiny_model(directory: Path, sizes: TinySizes = TinySizes(), seed: int = 0) -> dict[str, Any]:
    """Create the checkpoint directory; returns the manifest. Same seed and sizes → same weights."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(sizes.vocab)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=len(tokenizer),
        hidden_size=sizes.hidden,
        intermediate_size=sizes.hidden * 2,
        moe_intermediate_size=sizes.moe_intermediate,
        num_hidden_layers=sizes.layers,
        num_attention_heads=sizes.heads,
        num_key_value_heads=sizes.kv_heads,
        num_experts=sizes.experts,
        num_experts_per_tok=sizes.top_k,
        norm_topk_prob=True,
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():  # random routers: a spread of experts is chosen, not one favourite
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0.0, 0.5)
    model.save_pretrained(directory)
    (directory / EXPERTS_DIR).mkdir(exist_ok=True)
    experts: dict[str, str] = {}
    blocks: dict[str, list[str]] = {}
    lengths: dict[str, int] = {}
    for index, layer in enumerate(model.model.layers):
        block = layer.mlp.experts
        for expert in range(sizes.experts):
            path = expert_file(directory, index, expert)
            save_file(
                {
                    "gate_up_proj": block.gate_up_proj[expert].detach().contiguous(),
                    "down_proj": block.down_proj[expert].detach().contiguous(),
                },
                str(path),
            )
            data, key = path.read_bytes(), f"{index}/{expert}"
            experts[key] = hashlib.sha3_256(data).hexdigest()
            blocks[key] = sha3_blocks(data)
            lengths[key] = len(data)
    manifest = {
        "format": 1,
        "model_id": f"tiny-qwen3-moe-h{sizes.hidden}-l{sizes.layers}-e{sizes.experts}-k{sizes.top_k}",
        "aliases": [TINY_ALIAS],  # the name clients may also ask for (GET /v1/models lists both)
        "created": int(time.time()),
        "weights_sha3": sha3_file(directory / WEIGHTS_FILE),
        "experts": experts,
        "block_bytes": BLOCK_BYTES,
        "expert_blocks": blocks,
        "expert_bytes": lengths,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    return manifest


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{directory} is not a treemeter checkpoint (no {MANIFEST}).")
    manifest: dict[str, Any] = json.loads(path.read_text())
    return manifest


def verify_weights(directory: Path, manifest: dict[str, Any]) -> str:
    """The weights fingerprint, after checking it against the manifest."""
    actual = sha3_file(directory / WEIGHTS_FILE)
    if actual != manifest["weights_sha3"]:
        raise CheckpointError(
            f"{directory / WEIGHTS_FILE}: SHA3-256 {actual} does not match the manifest "
            f"({manifest['weights_sha3']}); refusing to load."
        )
    return actual
