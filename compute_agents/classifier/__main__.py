"""``python -m compute_agents.classifier train --rules RULES.json --out BUNDLE.json [--encoder-dir DIR]
[--threshold T] [--early-layers N]``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compute_agents.classifier.model import DEFAULT_THRESHOLD, ClassifierError
from compute_agents.classifier.train import EARLY_LAYERS, train_bundle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compute_agents.classifier")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train the head and write the rules bundle")
    train.add_argument("--rules", type=Path, default=None, help="rules JSON (default: the built-in rules)")
    train.add_argument("--out", type=Path, required=True, help="the bundle to write")
    train.add_argument("--encoder-dir", type=Path, default=None, help="where the ONNX encoder goes")
    train.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    train.add_argument(
        "--early-layers", type=int, default=EARLY_LAYERS, help="the early exit's encoder layers (0: none)"
    )
    args = parser.parse_args(argv)
    try:
        trained = train_bundle(
            args.rules, args.out, args.encoder_dir, threshold=args.threshold, early_layers=args.early_layers
        )
    except ClassifierError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in trained.report.lines():
        print(line)
    print(f"encoder: {' + '.join(str(f) for f in (trained.files.first, trained.files.rest) if f)}")
    print(
        f"bundle: {trained.bundle_path} sha256 {trained.bundle_sha256}"
        f" (L1 node l1.{trained.bundle_sha256[:16]})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
