"""Agent throughput under concurrent clients: tokens/s through the torch engine at 1, 4 and 16 clients
at once, metering fully on and fully off, and their ratio at each level (goal >= 0.98).

The engine serves up to ``--workers`` requests at once on one model (each with its own routing capture
and cache counts). On and off as in bench/agent_overhead.py: on is router capture, a v1 record per
request committed to the fsync'd SQLite spool, and signed batches; off is the same engine and prompts
with none of it. Each level runs one warm-up round, then ``--rounds`` rounds; a round sends every prompt
once, in waves of one prompt per client, and each wave runs off and on back to back (alternating which
goes first), so drift and noise bursts hit both alike. Printed per level: the tokens/s ratio, the median
ratio of same-wave pairs, and the metering work itself (counts, record, fsync'd spool commit after the
forward passes), timed per request and as a share of the request's latency.

    .venv/bin/python bench/agent_concurrency.py [--clients 1,4,16] [--requests 32] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT), str(ROOT / "bench")]

from agent_overhead import METERING_NS, prompts, serve_off, serve_on, ship  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from compute_agents.checkpoint import TinySizes, create_tiny_model  # noqa: E402
from compute_agents.engine import TorchEngine  # noqa: E402
from compute_agents.manifest_signature import ManifestTrust, sign_manifest  # noqa: E402
from compute_agents.spool import Spool  # noqa: E402
from treemeter_records import private_key_from_seed  # noqa: E402


def one_wave(pool: ThreadPoolExecutor, serve: Any, texts: list[str]) -> tuple[int, float]:
    """The prompts at once, one per client; (tokens, seconds)."""
    started = time.perf_counter()
    tokens = sum(pool.map(serve, texts))
    return tokens, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16, help="requests the engine serves at once")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = Path(scratch) / "model"
        sizes = TinySizes(
            hidden=args.hidden, layers=args.layers, experts=args.experts, moe_intermediate=args.hidden // 2
        )
        manifest = create_tiny_model(model_dir, sizes)
        publisher = Ed25519PrivateKey.generate()  # the bench publishes its own checkpoint
        sign_manifest(model_dir, publisher)
        trust = ManifestTrust.of(manifest["model_id"], publisher.public_key())
        threads = args.threads or None
        on_engine = TorchEngine(model_dir, trust=trust, threads=threads, workers=args.workers)
        off_engine = TorchEngine(model_dir, trust=trust, capture=False, threads=threads, workers=args.workers)
        spool = Spool(Path(scratch) / "spool.sqlite3")
        key = private_key_from_seed(os.urandom(32))
        texts = prompts(args.requests)
        served = [0]
        latency_ns: list[int] = []

        def on(text: str) -> int:
            started = time.perf_counter_ns()
            tokens = serve_on(on_engine, spool, text, args.max_tokens)
            latency_ns.append(time.perf_counter_ns() - started)
            served[0] += 1
            if served[0] % 10 == 0:
                ship(spool, key)
            return tokens

        def off(text: str) -> int:
            return serve_off(off_engine, text, args.max_tokens)

        print(
            f"model: Qwen3-MoE hidden {args.hidden}, {args.layers} MoE layers, {args.experts} experts, "
            f"top-2 (fp32, CPU, {os.cpu_count()} cores, torch threads {threads or 'default'}); "
            f"{args.requests} requests × {args.rounds} rounds per level, max_tokens {args.max_tokens}, "
            f"engine workers {args.workers}"
        )
        print(
            f"{'clients':>7}  {'off tokens/s':>12}  {'on tokens/s':>11}  {'on/off':>6}  {'median pair':>11}  "
            f"{'metering ms/request':>19}  {'of latency':>10}"
        )
        for clients in levels:
            totals = {"on": [0, 0.0], "off": [0, 0.0]}
            pair_ratios: list[float] = []  # off seconds / on seconds of the same wave of prompts
            waves = [texts[i : i + clients] for i in range(0, len(texts), clients)]
            with ThreadPoolExecutor(max_workers=clients) as pool:
                for index in range(args.rounds + 1):  # round 0 warms up and is not counted
                    if index == 1:
                        del METERING_NS[:], latency_ns[:]
                    for number, wave in enumerate(waves):
                        pair = (("off", off), ("on", on))
                        seconds: dict[str, float] = {}
                        for name, serve in pair if (index + number) % 2 else pair[::-1]:
                            tokens, seconds[name] = one_wave(pool, serve, wave)
                            if index:
                                totals[name][0] += tokens
                                totals[name][1] += seconds[name]
                        if index:
                            pair_ratios.append(seconds["off"] / seconds["on"])
            rate = {name: tokens / seconds for name, (tokens, seconds) in totals.items()}
            metering_ms = statistics.mean(METERING_NS) / 1e6
            share = statistics.mean(METERING_NS) / statistics.mean(latency_ns)
            print(
                f"{clients:>7}  {rate['off']:>12.1f}  {rate['on']:>11.1f}  {rate['on'] / rate['off']:>6.4f}  "
                f"{statistics.median(pair_ratios):>11.4f}  {metering_ms:>19.2f}  {share:>9.2%}"
            )


if __name__ == "__main__":
    main()
