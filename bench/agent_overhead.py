"""Metering overhead of the agent: tokens/s through the torch engine with metering fully on and fully off.

On: router capture hooks, per-expert counts, a v1 record per request committed to the SQLite spool
(WAL, fsync), and Ed25519-signed batches of the spooled records (as the shipper builds them).
Off: the same engine and the same prompts with no hooks, no record, no spool, no signing.
Both run in one process, interleaved request by request so drift affects both alike. Goal: ratio >= 0.98.

    .venv/bin/python bench/agent_overhead.py [--requests 40] [--max-tokens 32] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT)]

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from compute_agents.checkpoint import TinySizes, create_tiny_model  # noqa: E402
from compute_agents.engine import SamplingParams, TorchEngine, expert_counts  # noqa: E402
from compute_agents.manifest_signature import ManifestTrust, sign_manifest  # noqa: E402
from compute_agents.router import Rules  # noqa: E402
from compute_agents.spool import Spool  # noqa: E402
from treemeter_records import build_batch, make_record, private_key_from_seed  # noqa: E402

WORDS = [
    "the",
    "contract",
    "review",
    "clause",
    "party",
    "payment",
    "invoice",
    "patient",
    "report",
    "expert",
    "合同",
    "审查",
    "发票",
]


def prompts(count: int) -> list[str]:
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(8 + i % 24)) for i in range(count)]


def serve_off(engine: TorchEngine, text: str, max_tokens: int) -> int:
    return engine.generate(text, SamplingParams(max_tokens, temperature=0.0)).tokens_out


def serve_on(engine: TorchEngine, spool: Spool, text: str, max_tokens: int) -> int:
    start_ns = time.time_ns()
    generation = engine.generate(text, SamplingParams(max_tokens, temperature=0.0))
    metering_started = time.perf_counter_ns()
    experts = expert_counts(generation.routed, engine.num_experts)

    def build(seq: int) -> dict[str, Any]:
        return make_record(
            agent_id="bench",
            seq=seq,
            tenant="t",
            contract="c",
            package="p",
            sla_class="standard",
            client_request_id="",
            model_id=engine.model_id,
            weights_sha3=engine.weights_sha3,
            start_ns=start_ns,
            end_ns=time.time_ns(),
            clock_drift_us=0,
            tokens_in=generation.tokens_in,
            tokens_out=generation.tokens_out,
            hops=[
                {"layer": "L1", "node": "l1", "latency_us": 1},
                {"layer": "L2", "node": "l2", "latency_us": generation.l2_us},
                {"layer": "L3", "node": "l3", "latency_us": generation.l3_us},
                {"layer": "L1", "node": "l1", "latency_us": 1},
            ],
            experts=experts,
            prefix_cache_hit_tokens=0,
            expert_cache_hits=generation.expert_cache_hits,
            expert_cache_misses=generation.expert_cache_misses,
            status="ok",
        )

    started = time.perf_counter_ns()
    spool.append(build)
    ended = time.perf_counter_ns()
    SPOOL_NS.append(ended - started)
    METERING_NS.append(ended - metering_started)
    return generation.tokens_out


SPOOL_NS: list[int] = []  # time of each fsync'd spool commit
METERING_NS: list[int] = []  # per request, the metering work after the forward passes (counts, record, spool)


def ship(spool: Spool, key: Any) -> None:
    """What the shipper does per batch, minus the network: read, sign, acknowledge."""
    rows = spool.pending(1000)
    if rows:
        build_batch([orjson.loads(body) for _, _, body in rows], "bench", key)
        spool.acknowledge([seq for seq, _, _ in rows])


def l1_decision_us(texts: list[str], repeat: int = 200) -> float:
    """Median µs of the L1 rules decision (syntax layer + policy table) per request."""
    rules = Rules.load(None)
    samples = []
    for _ in range(repeat):
        for text in texts:
            started = time.perf_counter_ns()
            rules.check("/v1/completions", {"model": "tiny", "prompt": text, "max_tokens": 32})
            rules.path_for("contract-review", "gold")
            samples.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least sensitive to noise)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = Path(scratch) / "model"
        sizes = TinySizes(
            hidden=args.hidden, layers=args.layers, experts=args.experts, moe_intermediate=args.hidden // 2
        )
        manifest = create_tiny_model(model_dir, sizes)
        publisher = Ed25519PrivateKey.generate()  # the bench publishes its own checkpoint
        sign_manifest(model_dir, publisher)
        trust = ManifestTrust.of(manifest["model_id"], publisher.public_key())
        parameters = sum(p.numel() for p in TorchEngine(model_dir, trust=trust).model.parameters())
        on_engine = TorchEngine(model_dir, trust=trust, threads=args.threads)
        off_engine = TorchEngine(model_dir, trust=trust, capture=False, threads=args.threads)
        spool = Spool(Path(scratch) / "spool.sqlite3")
        texts = prompts(args.requests)
        key = private_key_from_seed(os.urandom(32))
        totals = {"on": [0, 0.0], "off": [0, 0.0]}
        pair_ratios: list[float] = []  # off seconds / on seconds for the same prompt: robust to noise bursts
        for round_index in range(args.rounds + 1):  # round 0 warms up and is not counted
            for index, text in enumerate(texts):
                order = ("off", "on") if index % 2 == 0 else ("on", "off")
                seconds: dict[str, float] = {}
                for name in order:
                    started = time.perf_counter()
                    if name == "off":
                        tokens = serve_off(off_engine, text, args.max_tokens)
                    else:
                        tokens = serve_on(on_engine, spool, text, args.max_tokens)
                        if index % 10 == 9:
                            ship(spool, key)
                    seconds[name] = time.perf_counter() - started
                    if round_index:
                        totals[name][0] += tokens
                        totals[name][1] += seconds[name]
                if round_index:
                    pair_ratios.append(seconds["off"] / seconds["on"])
    rate = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
    print(
        f"model: Qwen3-MoE hidden {args.hidden}, {args.layers} MoE layers, {args.experts} experts, top-2, "
        f"{parameters / 1e6:.2f} M parameters (fp32, CPU, {os.cpu_count()} cores)"
    )
    print(f"requests: {args.requests} × {args.rounds} rounds, max_tokens {args.max_tokens}")
    print(f"metering off: {rate['off']:.1f} tokens/s")
    print(f"metering on:  {rate['on']:.1f} tokens/s (capture, record, fsync'd spool, signed batch)")
    print(f"ratio on/off: {rate['on'] / rate['off']:.4f}  (goal >= 0.98)")
    print(f"median ratio of same-prompt pairs: {statistics.median(pair_ratios):.4f}")
    print(
        f"spool commit (fsync) per request: median {statistics.median(SPOOL_NS) / 1e6:.2f} ms, "
        f"mean {statistics.mean(SPOOL_NS) / 1e6:.2f} ms; per request off: "
        f"{totals['off'][1] / (args.requests * args.rounds) * 1000:.1f} ms"
    )
    print(f"L1 rules decision: {l1_decision_us(texts):.1f} µs per request (median; goal < 1000)")


if __name__ == "__main__":
    main()
