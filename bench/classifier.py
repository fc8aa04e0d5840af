"""L1's semantic classifier: decision latency (p50/p99) and held-out accuracy.

    .venv/bin/python bench/classifier.py [--bundle BUNDLE.json] [--n 1000] [--max-length 64]
        [--layers 6] [--early-layers 2]

Without ``--bundle`` a bundle is trained first (``compute_agents.classifier.train``) into a temporary
directory. Each decision is one ``DomainClassifier.classify`` (tokenise, ONNX encoder on one thread,
softmax head; with the early exit, the rest of the encoder and the whole head only for the prompts the
early head is not sure of) over the held-out prompts in turn. The latency is printed for all decisions,
then for those decided early and those that ran the whole encoder.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compute_agents.classifier import DomainClassifier
from compute_agents.classifier.train import EARLY_LAYERS, LAYERS, MAX_LENGTH, load_examples, train_bundle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", type=Path, default=None)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument(
        "--max-length", type=int, default=MAX_LENGTH, help="tokens the encoder reads (trained)"
    )
    parser.add_argument("--layers", type=int, default=LAYERS, help="encoder layers kept (trained)")
    parser.add_argument(
        "--early-layers", type=int, default=EARLY_LAYERS, help="the early exit's layers (0: none; trained)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        bundle = args.bundle
        if bundle is None:
            bundle = Path(scratch) / "bundle.json"
            started = time.perf_counter()
            train_bundle(
                None, bundle, max_length=args.max_length, layers=args.layers, early_layers=args.early_layers
            )
            print(f"trained a bundle in {time.perf_counter() - started:.1f} s")
        spec = json.loads(bundle.read_bytes())["classifier"]
        classifier = DomainClassifier.from_spec(spec, bundle.parent)
        test = [e for e in load_examples() if e.split == "test"]
        for example in test[:20]:  # warm-up
            classifier.classify(example.text)
        timings, hits, confident, early = [], [], [], []
        for i in range(args.n):
            example = test[i % len(test)]
            started = time.perf_counter_ns()
            decision = classifier.classify(example.text)
            timings.append(time.perf_counter_ns() - started)
            early.append(decision.early)
            if i < len(test):
                hits.append((example.lang, decision.domain == example.domain))
                confident.append(decision.confidence >= classifier.threshold)
    us = np.asarray(timings) / 1000
    print(
        f"decisions: {args.n} over {len(test)} held-out prompts, max_length {spec['max_length']}, one thread"
    )
    exited = np.asarray(early)
    for name, chosen in (("all", np.ones_like(exited)), ("early exit", exited), ("whole encoder", ~exited)):
        if chosen.any():
            print(
                f"latency, {name} ({chosen.mean():.1%}): p50 {np.percentile(us[chosen], 50):.0f} µs, "
                f"p99 {np.percentile(us[chosen], 99) / 1000:.2f} ms, max {us[chosen].max() / 1000:.2f} ms"
            )
    print(f"held-out accuracy {np.mean([h for _, h in hits]):.4f}", end="")
    for lang in sorted({lang for lang, _ in hits}):
        print(f", {lang} {np.mean([h for la, h in hits if la == lang]):.4f}", end="")
    sure = [hit for (_, hit), high in zip(hits, confident, strict=True) if high]
    print(
        f"; at or above threshold {classifier.threshold}: {np.mean(confident):.1%}"
        f" (right: {np.mean(sure) if sure else float('nan'):.4f})"
    )
    training = spec["training"]
    if "temperature" in training:
        print(
            f"calibration: temperature {training['temperature']}, held-out expected calibration error "
            f"{training['heldout_calibration_error']:.4f}"
        )


if __name__ == "__main__":
    main()
