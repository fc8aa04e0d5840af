"""Ed25519 keys, key ids and batch header signatures."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .encoding import canonical_bytes

SIGNATURE_DOMAIN = b"treemeter-batch-v1\n"
"""Prefix of every signed message, so a batch signature can never be replayed in another protocol."""

PublicKeyLike = Ed25519PublicKey | bytes
_RAW = serialization.Encoding.Raw


def generate_keypair() -> tuple[Ed25519PrivateKey, Ed25519PublicKey]:
    """A fresh random Ed25519 key pair."""
    private_key = Ed25519PrivateKey.generate()
    return private_key, private_key.public_key()


def private_key_from_seed(seed: bytes) -> Ed25519PrivateKey:
    """Load a private key from its raw 32-byte seed."""
    if len(seed) != 32:
        raise ValueError("an Ed25519 seed is exactly 32 bytes")
    return Ed25519PrivateKey.from_private_bytes(seed)


def private_key_seed(private_key: Ed25519PrivateKey) -> bytes:
    """The raw 32-byte seed of ``private_key`` (what an agent stores)."""
    return private_key.private_bytes(_RAW, serialization.PrivateFormat.Raw, serialization.NoEncryption())


def public_key_bytes(key: Ed25519PrivateKey | Ed25519PublicKey | bytes) -> bytes:
    """The raw 32-byte public key."""
    if isinstance(key, bytes):
        if len(key) != 32:
            raise ValueError("an Ed25519 public key is exactly 32 bytes")
        return key
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return key.public_bytes(_RAW, serialization.PublicFormat.Raw)


def load_public_key(key: PublicKeyLike) -> Ed25519PublicKey:
    """An ``Ed25519PublicKey`` from raw bytes (or the key itself)."""
    if isinstance(key, Ed25519PublicKey):
        return key
    return Ed25519PublicKey.from_public_bytes(public_key_bytes(key))


def public_key_to_b64(key: Ed25519PrivateKey | Ed25519PublicKey | bytes) -> str:
    """Standard base64 of the raw 32-byte public key (how keys are registered on the platform)."""
    return base64.b64encode(public_key_bytes(key)).decode("ascii")


def public_key_from_b64(text: str) -> Ed25519PublicKey:
    """Inverse of ``public_key_to_b64``; strict (no stray characters, exactly 32 bytes)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"public key is not valid base64: {exc}") from exc
    return load_public_key(raw)


def key_id_for(public_key: Ed25519PrivateKey | Ed25519PublicKey | bytes) -> str:
    """``"ed25519:"`` + the first 16 hex chars of SHA-256(raw 32-byte public key)."""
    return "ed25519:" + hashlib.sha256(public_key_bytes(public_key)).hexdigest()[:16]


def signing_message(header: Mapping[str, Any]) -> bytes:
    """What the Ed25519 signature covers: the domain string then the canonical header bytes."""
    return SIGNATURE_DOMAIN + canonical_bytes(dict(header))


def sign_header(header: Mapping[str, Any], private_key: Ed25519PrivateKey) -> str:
    """The standard-base64 Ed25519 signature of a batch header."""
    return base64.b64encode(private_key.sign(signing_message(header))).decode("ascii")


def verify_signature(header_bytes: bytes, signature: bytes, public_key: PublicKeyLike) -> bool:
    """Check a raw signature over already-canonical header bytes."""
    try:
        load_public_key(public_key).verify(signature, SIGNATURE_DOMAIN + header_bytes)
    except (InvalidSignature, ValueError):
        return False
    return True


def verify_header(header: Mapping[str, Any], signature_b64: str, public_key: PublicKeyLike) -> bool:
    """Check a base64 signature over a header given as a mapping."""
    try:
        signature = base64.b64decode(signature_b64, validate=True)
    except (binascii.Error, ValueError):
        return False
    return verify_signature(canonical_bytes(dict(header)), signature, public_key)
