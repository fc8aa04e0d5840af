"""The L1 rules an agent or router uses when it is given no rules file (no classifier: every request's
domain is ``*``). Apart from ``router`` so that the classifier's trainer can start from it without
importing the router, which imports the classifier."""

from __future__ import annotations

from typing import Any

DEFAULT_RULES: dict[str, Any] = {
    "version": 1,
    "syntax": [
        {"route": "^/v1/(chat/)?completions$", "param": "model", "pattern": "^[A-Za-z0-9._:/-]{1,128}$"},
        {"route": "^/v1/completions$", "param": "prompt", "pattern": "(?s)^.{1,16000}$"},
    ],
    "limits": {"max_tokens": 512},
    "policy": [
        {"package": "*", "sla_class": "batch", "path": ["L1", "L3", "L1"]},
        {"package": "*", "sla_class": "*", "path": ["L1", "L2", "L3", "L1"]},
    ],
}
