"""`python -m compute_agents`: the agent's command line.

Until the serving engine lands (the agent issue), the agent can create its Ed25519 identity and
send signed batches of synthetic MoE records, e.g. for load tests against a deployment.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from treemeter_records import (
    IngestClient,
    IngestError,
    build_batch,
    key_id_for,
    private_key_from_seed,
    public_key_to_b64,
)

from .synthetic import Workload, synthetic_records

DEFAULT_KEY_FILE = "/var/lib/treemeter-agent/agent.key"


def load_or_create_seed(path: Path) -> bytes:
    """The agent's 32-byte Ed25519 seed, created (mode 0600) on first use."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32))
    seed = path.read_bytes()
    if len(seed) != 32:
        raise SystemExit(f"{path} does not hold a 32-byte Ed25519 seed ({len(seed)} bytes).")
    return seed


def identity(args: argparse.Namespace) -> int:
    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    print(f"key_id      {key_id_for(key)}")
    print(f"public_key  {public_key_to_b64(key)}")
    print("Register it: manage.py register_agent <agent-id> --public-key <public_key> --contract <code>")
    return 0


def send_synthetic(args: argparse.Namespace) -> int:
    if args.records < 1 or args.batch_size < 1:
        print("--records and --batch-size must be positive.", file=sys.stderr)
        return 2
    key = private_key_from_seed(load_or_create_seed(Path(args.key_file)))
    workload = Workload(
        agent_id=args.agent_id, tenant=args.tenant, contract=args.contract, package=args.package
    )
    end_ns = time.time_ns()
    records = list(
        synthetic_records(
            workload,
            first_seq=args.first_seq,
            count=args.records,
            start_ns=end_ns - 3_600 * 10**9,
            end_ns=end_ns,
        )
    )
    totals = [0, 0, 0]
    with IngestClient(args.platform_url) as client:
        for offset in range(0, len(records), args.batch_size):
            try:
                answer = client.send(
                    build_batch(records[offset : offset + args.batch_size], args.agent_id, key)
                )
            except IngestError as error:
                print(f"batch at seq {args.first_seq + offset} failed: {error}", file=sys.stderr)
                return 1
            totals = [totals[0] + answer.accepted, totals[1] + answer.duplicate, totals[2] + answer.rejected]
            print(f"sent {min(offset + args.batch_size, len(records))}/{len(records)}", flush=True)
    print(f"accepted {totals[0]}, duplicate {totals[1]}, rejected {totals[2]}")
    return 0 if totals[2] == 0 else 1


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="python -m compute_agents",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--key-file", default=os.environ.get("TREEMETER_AGENT_KEY_FILE", DEFAULT_KEY_FILE))
    commands = root.add_subparsers(dest="command")
    commands.add_parser("identity", help="create the key if needed; print key id and public key (default)")
    send = commands.add_parser("send-synthetic", help="sign and send synthetic MoE records")
    send.add_argument(
        "--platform-url", default=os.environ.get("TREEMETER_PLATFORM_URL", "http://127.0.0.1:8000")
    )
    send.add_argument("--agent-id", required=True)
    send.add_argument("--tenant", required=True)
    send.add_argument("--contract", required=True)
    send.add_argument("--package", required=True)
    send.add_argument("--records", type=int, default=1_000)
    send.add_argument("--batch-size", type=int, default=1_000)
    send.add_argument("--first-seq", type=int, default=0)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "send-synthetic":
        return send_synthetic(args)
    return identity(args)
