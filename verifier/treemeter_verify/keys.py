"""Pinned keys: the platform's note verifier key and the agents' Ed25519 keys."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .note import NoteKey, parse_verifier_key


@dataclass(frozen=True)
class PinnedKeys:
    platform: NoteKey
    agents: dict[str, bytes]  # key id ("ed25519:" + 16 hex) → raw public key


def agent_key_id(public_key: bytes) -> str:
    return "ed25519:" + hashlib.sha256(public_key).hexdigest()[:16]


def load_keys(path: Path) -> PinnedKeys:
    """``{"platform": "<name>+<hash>+<base64>", "agents": ["<base64 raw key>", ...]}``."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("platform"), str):
        raise ValueError("keys file needs a platform verifier key")
    agents: dict[str, bytes] = {}
    for text in data.get("agents", []):
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise ValueError(f"agent key {text!r} is not base64") from None
        if len(raw) != 32:
            raise ValueError(f"agent key {text!r} is not 32 bytes")
        agents[agent_key_id(raw)] = raw
    return PinnedKeys(platform=parse_verifier_key(data["platform"]), agents=agents)
