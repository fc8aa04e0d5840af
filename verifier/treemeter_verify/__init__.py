"""Offline verification of Treemeter invoice exports (depends on `cryptography` only)."""

from .check import Report, Verdict, verify_export
from .keys import PinnedKeys, load_keys

__all__ = ["PinnedKeys", "Report", "Verdict", "load_keys", "verify_export"]
