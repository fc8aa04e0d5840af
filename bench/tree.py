"""The serving tree's figures (issue 17), on real processes: the demo's tree (an L1 router with the
trained classifier; the gold requests measured here go to subtree default, its two executors) against a
live platform, and executors outside the tree.

- tokens/s through the router ÷ direct to one executor (same model, same prompts: the classifier's
  held-out ones in turn; interleaved request by request so drift hits both alike; the direct one runs
  outside the tree), at answers of 32 and 128 tokens: the router's cost is per request, so its share
  shrinks as answers grow; with the 95 % interval of the ratio, bootstrapped over the pairs, and the
  same ratio (from the records) were the router's decision free: a bound on what overlapping the
  decision with the executor's work could bring;
- the router's decision latency p50 / p99 (its own measure: key, format, rules, classifier, policy);
- the classifier's held-out accuracy (from the bundle it was trained into);
- the time from an executor's SIGKILL to the next successful answer, under two clients' load;
- the RSS of an executor at expert-cache capacities 2 and 8, after the same requests (a model with wider
  experts than the demo's, so that the experts' memory shows).

    make bench-tree ARGS="--requests 30 --max-tokens 32"
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(ROOT), str(ROOT / "platform"), str(ROOT / "bench")]

from benchdb import use_fresh_database  # noqa: E402

from compute_agents.classifier.train import load_examples  # noqa: E402


def _prompts() -> tuple[str, ...]:
    """The classifier's held-out prompts (12 domains, English and Chinese) in a fixed shuffled order, so
    that any first N mix domains and languages: about as many of them run the whole encoder as in its
    held-out figures (43 %), where a few hand-picked prompts may all leave at the early exit."""
    texts = [example.text for example in load_examples() if example.split == "test"]
    random.Random(0).shuffle(texts)
    return tuple(texts)


PROMPTS = _prompts()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100, help="request pairs for the ratio")
    parser.add_argument(
        "--max-tokens",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[32, 128],
        help="answer lengths of the ratio, comma-separated: the router's cost is per request, so the "
        "shorter the answer the larger its share",
    )
    parser.add_argument(
        "--overhead-requests",
        type=int,
        default=200,
        help="request pairs of one output token: the router's added time, and decisions for its p99",
    )
    args = parser.parse_args()
    use_fresh_database("treemeter_bench_tree")
    with tempfile.TemporaryDirectory() as scratch:
        run(Path(scratch), args.requests, args.max_tokens, args.overhead_requests)


def run(data_dir: Path, requests: int, lengths: list[int], overhead_requests: int) -> None:
    from agents.services import register_agent
    from clickhouse_store.migrator import apply_migrations
    from clickhouse_store.queries.records import expert_cache_counts, layer_latencies, served_spans
    from compute_agents.checkpoint import TinySizes, create_tiny_model
    from compute_agents.runtime import pin_platform_key
    from demo.server import start_api_server
    from demo.services import EXECUTOR_IDS, read_or_create_seed, seed_demo
    from demo.tree import agent_command, free_port, model_dir, publish_model, start_tree
    from treemeter_records import private_key_from_seed, public_key_to_b64

    apply_migrations()
    setup = seed_demo(data_dir)
    server, platform_url = start_api_server("127.0.0.1", 0)
    started = time.perf_counter()
    tree = start_tree(setup, platform_url, "127.0.0.1")
    print(f"tree up in {time.perf_counter() - started:.1f} s (classifier trained, a router and 3 executors)")
    # Outside the tree: "direct", the tree's model at the tree's capacity (the ratio), and the same wide
    # model at capacities 2 and 8 (RSS: the demo's experts are too small, 0.1 MB each, to show in it).
    wide = data_dir / "wide-model"
    create_tiny_model(wide, TinySizes(hidden=512, layers=4, experts=16, moe_intermediate=256))
    publish_model(wide, data_dir)
    outside = {"direct": (model_dir(data_dir), 8), "rss-2": (wide, 2), "rss-8": (wide, 8)}
    direct: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
    for label, (checkpoint, capacity) in outside.items():
        name = f"bench-{label}"
        directory = data_dir / name
        directory.mkdir()
        seed = read_or_create_seed(directory / "agent.key")
        register_agent(
            agent_id=name,
            public_key_b64=public_key_to_b64(private_key_from_seed(seed)),
            tenant_codes=[],
            contract_codes=[c.code for c in setup.contracts],
        )
        pin_platform_key(platform_url, directory)
        port = free_port("127.0.0.1")
        command = agent_command(
            directory,
            *("serve", "--platform-url", platform_url, "--agent-id", name, "--data-dir", str(directory)),
            *("--model-dir", str(checkpoint), "--port", str(port), "--threads", "1"),
            *("--cache-capacity", str(capacity)),
            # shipping and quota as the tree's executors run (demo.tree), so the ratio is the router's
            *("--batch-size", "50", "--batch-age", "0.5", "--quota-leases"),
        )
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        direct[label] = (f"http://127.0.0.1:{port}", process)
    key = next(k.secret for k in setup.keys if k.sla_class == "gold")
    headers = {"authorization": f"Bearer {key}"}
    client = httpx.Client(timeout=60)

    def ask(url: str, number: int, tokens: int = lengths[0]) -> tuple[int, int, float]:
        body = {"model": "tiny", "prompt": PROMPTS[number % len(PROMPTS)], "max_tokens": tokens}
        begun = time.perf_counter()
        answer = client.post(url + "/v1/completions", json={**body, "temperature": 0}, headers=headers)
        tokens = answer.json()["usage"]["completion_tokens"] if answer.status_code == 200 else 0
        return answer.status_code, tokens, time.perf_counter() - begun

    for url, _ in direct.values():
        _wait(lambda url=url: httpx.get(url + "/v1/models", timeout=2).status_code == 200)
    try:
        for number in range(4):  # warm-up: model pages, expert files, classifier
            ask(tree.url, number), ask(direct["direct"][0], number)
        ratios, windows = {}, {}
        for length in lengths:
            begun = datetime.now(UTC)
            ratios[length] = ratio(tree.url, direct["direct"][0], ask, requests, length)
            windows[length] = (begun, datetime.now(UTC))
        # The router's fixed cost per request: one output token each way, same prompts, interleaved.
        extra_ms = []
        overhead_start = datetime.now(UTC)
        for number in range(overhead_requests):
            direct_s = ask(direct["direct"][0], number, 1)[2]
            extra_ms.append((ask(tree.url, number, 1)[2] - direct_s) * 1000)
        overhead_end = datetime.now(UTC)
        stats = tree.get("/tree/stats")
        kill = kill_to_next_answer(tree, ask, EXECUTOR_IDS[0])
        for number in range(requests):  # the same requests through both capacities, then their RSS
            ask(direct["rss-2"][0], number), ask(direct["rss-8"][0], number)
        rss = {label: _rss_mib(process.pid) for label, (_, process) in direct.items()}
    finally:
        for _, process in direct.values():
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
        tree.stop()
        server.shutdown()
    # Where the time goes: the ratio loops' records per tree layer, routed (the tree's executors) and
    # direct; a routed record's first L1 hop holds the router's decision and the way to the executor.
    sides = (("router", list(EXECUTOR_IDS)), ("direct", ["bench-direct"]))
    window, window_end = windows[lengths[0]][0], windows[lengths[-1]][1]
    layers = {side: layer_latencies(window, window_end, agents) for side, agents in sides}
    cache = {side: expert_cache_counts(window, window_end, agents) for side, agents in sides}
    # Each answer length's records (whether the router's added time is in them), and the one-token
    # requests': arrival to answer, its L1 hops, and the router's part of them.
    length_spans = {
        length: {side: served_spans(begun, ended, agents) for side, agents in sides}
        for length, (begun, ended) in windows.items()
    }
    spans = {side: served_spans(overhead_start, overhead_end, agents) for side, agents in sides}
    bundle = orjson.loads((data_dir / "router" / "bundle.json").read_bytes())
    training = bundle["classifier"]["training"]
    decision = stats["decision_us"]
    print(
        f"model: the demo's tiny Qwen3-MoE; {requests} request pairs at each of max_tokens "
        f"{', '.join(map(str, lengths))}, temperature 0; {overhead_requests} pairs of max_tokens 1; "
        f"{decision['count']} decisions"
    )
    print(f"{'measure':<58} {'figure':>22}  target")
    rows = [
        *(
            row
            for length, (rate, pairs, interval) in ratios.items()
            for row in (
                (
                    f"max_tokens {length}: tokens/s through the router / direct",
                    f"{rate['router']:.1f} / {rate['direct']:.1f}",
                    "",
                ),
                ("  ratio router ÷ direct (totals)", f"{rate['router'] / rate['direct']:.4f}", ">= 0.95"),
                ("    its 95 % interval (bootstrap over the pairs)", "{:.4f}–{:.4f}".format(*interval), ""),
                (
                    "  ratio router ÷ direct (median of same-prompt pairs)",
                    f"{statistics.median(pairs):.4f}",
                    ">= 0.95",
                ),
                (
                    "  record's arrival to answer p50, routed / direct",
                    f"{length_spans[length]['router'][0] / 1000:.2f} / "
                    f"{length_spans[length]['direct'][0] / 1000:.2f} ms",
                    "",
                ),
                (
                    "  the same ratio were the decision free (record p50s)",
                    f"{without_decision(length_spans[length]):.4f}",
                    "",
                ),
            )
        ),
        (
            "router's added time per request, max_tokens 1 (median)",
            f"{statistics.median(extra_ms):.1f} ms",
            "",
        ),
        (
            "  record's arrival to answer p50, routed / direct",
            f"{spans['router'][0] / 1000:.2f} / {spans['direct'][0] / 1000:.2f} ms",
            "",
        ),
        (
            "  of which L1 p50, routed / direct",
            f"{spans['router'][1] / 1000:.2f} / {spans['direct'][1] / 1000:.2f} ms",
            "",
        ),
        (
            "  of which the router, arrival to signed decision (p50)",
            f"{spans['router'][2] / 1000:.2f} ms",
            "",
        ),
        *(
            (
                f"  {layer} time p50, routed / direct",
                f"{layers['router'][layer][0] / 1000:.1f} / {layers['direct'][layer][0] / 1000:.1f} ms",
                "",
            )
            for layer in ("L1", "L2", "L3")
        ),
        (
            "  expert cache misses per 1,000 uses, routed / direct",
            " / ".join(
                f"{1000 * cache[side][1] / max(1, sum(cache[side])):.1f}" for side in ("router", "direct")
            ),
            "",
        ),
        (
            "router decision latency p50 / p99",
            f"{decision['p50'] / 1000:.2f} / {decision['p99'] / 1000:.2f} ms",
            "p99 <= 10 ms",
        ),
        (
            "  decided on the encoder's first layers (early exit)",
            f"{stats['early_exits']} of {stats['decisions']}",
            "",
        ),
        (
            "classifier held-out accuracy (all / en / zh)",
            f"{training['heldout_accuracy']:.3f} / "
            + " / ".join(f"{training['heldout_accuracy_by_lang'][lang]:.3f}" for lang in ("en", "zh")),
            "reported",
        ),
        ("SIGKILL of an executor → next successful answer", f"{kill['seconds'] * 1000:.0f} ms", "<= 1 s"),
        ("  answers that failed after the kill", str(kill["failed"]), ""),
        ("  failovers counted by the router", str(kill["failovers"]), ""),
        ("RSS of an executor, wide model (1.6 MB/expert), capacity 2", f"{rss['rss-2']:.0f} MiB", "reported"),
        ("RSS of an executor, wide model (1.6 MB/expert), capacity 8", f"{rss['rss-8']:.0f} MiB", "reported"),
        (
            "  difference (6 experts × 4 layers ≈ 38 MB expected)",
            f"{rss['rss-8'] - rss['rss-2']:.0f} MiB",
            "",
        ),
    ]
    for name, figure, target in rows:
        print(f"{name:<58} {figure:>22}  {target}")


def ratio(
    router_url: str, direct_url: str, ask: Any, requests: int, length: int
) -> tuple[dict[str, float], list[float], tuple[float, float]]:
    """Tokens/s through the router and direct, each same-prompt pair's ratio, and the 95 % interval of
    the totals' ratio (bootstrap over the pairs, a fixed seed), interleaved request by request (the side
    going first alternates) so that drift hits both alike."""
    sides: dict[str, list[tuple[int, float]]] = {"router": [], "direct": []}
    for number in range(requests):
        order = ("router", "direct") if number % 2 else ("direct", "router")
        for side in order:
            status, tokens, seconds = ask(router_url if side == "router" else direct_url, number, length)
            assert status == 200, (side, status)
            sides[side].append((tokens, seconds))

    def totals_ratio(pairs: list[int]) -> float:
        rate = {
            side: sum(answers[i][0] for i in pairs) / sum(answers[i][1] for i in pairs)
            for side, answers in sides.items()
        }
        return rate["router"] / rate["direct"]

    rng = random.Random(0)
    drawn = sorted(totals_ratio([rng.randrange(requests) for _ in range(requests)]) for _ in range(2000))
    rates = {side: sum(t for t, _ in answers) / sum(s for _, s in answers) for side, answers in sides.items()}
    pairs = [d[1] / r[1] for r, d in zip(sides["router"], sides["direct"], strict=True)]
    return rates, pairs, (drawn[49], drawn[1949])


def without_decision(spans: dict[str, tuple[int, int, int]]) -> float:
    """Direct ÷ routed arrival to answer (record p50s), the router's arrival-to-signed-decision p50 taken
    out of the routed one: a bound on what any overlap of the decision with the executor's work (a
    speculative start) could bring; the rest of the gap is the hop itself."""
    routed, _, decision = spans["router"]
    return spans["direct"][0] / max(1, routed - decision)


def kill_to_next_answer(tree: Any, ask: Any, victim: str) -> dict[str, Any]:
    """Two clients send through the router; one executor is killed; how long until an answer succeeds."""
    stop = threading.Event()
    answers: list[tuple[float, int]] = []  # (finished at, status)

    def send(sender: int) -> None:
        number = sender
        while not stop.is_set():
            status, _, _ = ask(tree.url, number)
            answers.append((time.perf_counter(), status))
            number += 2

    before = tree.get("/tree/stats")["failovers"]
    senders = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for thread in senders:
        thread.start()
    time.sleep(2.0)
    killed_at = time.perf_counter()
    tree.processes[victim].send_signal(signal.SIGKILL)
    tree.processes[victim].wait()
    time.sleep(3.0)
    stop.set()
    for thread in senders:
        thread.join()
    after = [(at, status) for at, status in answers if at > killed_at]
    first_ok = min(at for at, status in after if status == 200)
    return {
        "seconds": first_ok - killed_at,
        "failed": sum(status != 200 for _, status in after),
        "failovers": tree.get("/tree/stats")["failovers"] - before,
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _wait(check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:  # not listening yet
            pass
        time.sleep(0.2)
    raise RuntimeError("a process did not come up")


if __name__ == "__main__":
    main()
