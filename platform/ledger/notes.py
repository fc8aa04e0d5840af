"""C2SP tlog-checkpoint bodies in C2SP signed notes, signed with Ed25519 (signature type 0x01).

Body: ``<origin>\\n<tree size>\\n<base64 root hash>\\n``. Note: body, an empty line, then one line per
signature: ``— <key name> <base64(key hash[4] ‖ signature[64])>``. The key hash is the first 4 bytes of
SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key). A verifier key is written
``<name>+<hex key hash>+<base64(0x01 ‖ public key)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ED25519 = b"\x01"
DASH = "\u2014"
# C2SP tlog-checkpoint: the tree size is an ASCII decimal without leading zeroes, at most 2^64 − 1.
TREE_SIZE = re.compile(r"0|[1-9][0-9]{0,19}", re.ASCII)  # 20 digits at most: 2^64 has 20
TREE_SIZE_MAX = 2**64 - 1


class NoteError(ValueError):
    """A note or checkpoint that does not parse or does not verify."""


@dataclass(frozen=True)
class CheckpointBody:
    origin: str
    size: int
    root_hash: bytes

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root_hash).decode()}\n"


def raw_public_key(key: Ed25519PrivateKey | Ed25519PublicKey) -> bytes:
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_hash(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public_key).digest()[:4]


def verifier_key(name: str, public_key: bytes) -> str:
    """The vkey text a customer pins: ``name+hash+base64(0x01 ‖ key)``."""
    return f"{name}+{key_hash(name, public_key).hex()}+{base64.b64encode(ED25519 + public_key).decode()}"


def sign_checkpoint(body: CheckpointBody, key: Ed25519PrivateKey) -> str:
    text = body.text()
    signature = key.sign(text.encode())
    blob = base64.b64encode(key_hash(body.origin, raw_public_key(key)) + signature).decode()
    return f"{text}\n{DASH} {body.origin} {blob}\n"


def open_checkpoint(note: str, name: str, public_key: bytes) -> CheckpointBody:
    """Parse a signed checkpoint and check the signature of key ``name``/``public_key`` on it."""
    text, sep, signatures = note.partition("\n\n")
    if not sep or not text:
        raise NoteError("a signed note is a text, an empty line and signature lines")
    text += "\n"
    wanted = key_hash(name, public_key)
    verified = False
    for line in signatures.splitlines():
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != DASH:
            raise NoteError(f"malformed signature line {line!r}")
        try:
            blob = base64.b64decode(parts[2], validate=True)
        except (binascii.Error, ValueError):
            raise NoteError("signature is not base64") from None
        if parts[1] != name or blob[:4] != wanted or len(blob) != 68:
            continue
        try:
            Ed25519PublicKey.from_public_bytes(public_key).verify(blob[4:], text.encode())
        except InvalidSignature:
            raise NoteError(f"the signature of {name} does not verify") from None
        verified = True
    if not verified:
        raise NoteError(f"no signature by key {name}+{wanted.hex()}")
    return parse_body(text)


def parse_body(text: str) -> CheckpointBody:
    """A checkpoint body in exactly the C2SP grammar: a non-empty origin, the tree size (ASCII digits,
    no leading zero, below 2^64), the root hash in canonical standard base64 (padding bits zero, so one
    root has one text), then any extension lines."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin, a size and a root hash line")
    origin, size, root = lines[0], lines[1], lines[2]
    if TREE_SIZE.fullmatch(size) is None or int(size) > TREE_SIZE_MAX:
        raise NoteError(f"tree size {size!r} is not an ASCII decimal below 2^64 without leading zeroes")
    try:
        root_hash = base64.b64decode(root, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError("root hash is not base64") from None
    if base64.b64encode(root_hash).decode() != root:
        raise NoteError("root hash is not canonical base64 (its padding bits are not zero)")
    if len(root_hash) != 32 or not origin:
        raise NoteError("a checkpoint needs an origin and a 32-byte root hash")
    return CheckpointBody(origin=origin, size=int(size), root_hash=root_hash)
