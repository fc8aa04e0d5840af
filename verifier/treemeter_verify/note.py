"""C2SP signed notes holding C2SP tlog-checkpoints, with Ed25519 (signature type 0x01)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

DASH = "\u2014"
# C2SP tlog-checkpoint: the tree size is an ASCII decimal without leading zeroes, at most 2^64 − 1.
TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,19}", re.ASCII)  # 20 digits at most: 2^64 has 20
TREE_SIZE_MAX = 2**64 - 1


class NoteError(ValueError):
    pass


@dataclass(frozen=True)
class NoteKey:
    name: str
    key_hash: bytes
    public_key: bytes


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root_hash: bytes


def parse_verifier_key(text: str) -> NoteKey:
    """``<name>+<8 hex key hash>+<base64(0x01 ‖ 32-byte key)>``, the hash re-derived and checked."""
    name, _, rest = text.strip().partition("+")
    hash_hex, _, key_b64 = rest.partition("+")
    try:
        blob = base64.b64decode(key_b64, validate=True)
        wanted = bytes.fromhex(hash_hex)
    except (binascii.Error, ValueError):
        raise NoteError("verifier key is not name+hash+base64") from None
    if not name or len(blob) != 33 or blob[0] != 1:
        raise NoteError("verifier key must carry an Ed25519 (type 0x01) key")
    key_hash = hashlib.sha256(name.encode() + b"\n" + blob).digest()[:4]
    if key_hash != wanted:
        raise NoteError("verifier key hash does not match its name and key")
    return NoteKey(name=name, key_hash=key_hash, public_key=blob[1:])


def open_checkpoint(note: str, key: NoteKey) -> Checkpoint:
    """The checkpoint in ``note`` if ``key`` signed it; NoteError otherwise."""
    text, sep, signatures = note.partition("\n\n")
    if not sep or not text:
        raise NoteError("a signed note is a text, an empty line and signature lines")
    text += "\n"
    signed = False
    for line in signatures.splitlines():
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != DASH:
            raise NoteError(f"malformed signature line {line!r}")
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except (binascii.Error, ValueError):
            raise NoteError("a note signature is not base64") from None
        if parts[1] != key.name or blob[:4] != key.key_hash or len(blob) != 68:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(key.public_key).verify(blob[4:], text.encode())
        except InvalidSignature:
            raise NoteError(f"the signature of {key.name} does not verify") from None
        signed = True
    if not signed:
        raise NoteError(f"the checkpoint carries no signature of the pinned key {key.name}")
    return _checkpoint(text, key.name)


def _checkpoint(text: str, origin: str) -> Checkpoint:
    """The body in exactly the C2SP grammar: the pinned origin, the tree size (ASCII digits, no leading
    zero, below 2^64), the root hash in canonical standard base64 (padding bits zero), then any
    extension lines."""
    lines = text.split("\n")
    if len(lines) < 4:
        raise NoteError("a checkpoint is an origin, a tree size and a root hash line")
    if lines[0] != origin:
        raise NoteError(f"checkpoint origin {lines[0]!r} is not the pinned log {origin!r}")
    size = lines[1]
    if TREE_SIZE.fullmatch(size) is None or int(size) > TREE_SIZE_MAX:
        raise NoteError(f"tree size {size!r} is not an ASCII decimal below 2^64 without leading zeroes")
    try:
        root = base64.b64decode(lines[2], validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("the root hash is not base64") from None
    if base64.b64encode(root).decode() != lines[2]:
        raise NoteError("the root hash is not canonical base64 (its padding bits are not zero)")
    if len(root) != 32:
        raise NoteError("the root hash is not 32 bytes")
    return Checkpoint(origin=origin, size=int(size), root_hash=root)
