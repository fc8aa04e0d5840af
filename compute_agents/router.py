"""L1: a deterministic rules engine, loaded once from one rules file whose hash goes into every record.

First a syntax layer (a regex per route and request parameter), then a policy table that maps
(package, SLA class) to the path a request takes through the tree. The first matching policy row wins;
``*`` matches anything. The file's SHA-256 is carried in each record's L1 hop node (``l1.<16 hex>``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
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
PATHS = {("L1", "L2", "L3", "L1"), ("L1", "L3", "L1")}


class RulesError(ValueError):
    """The rules file cannot be used."""


class RequestRefused(ValueError):
    """The request breaks a syntax rule (the customer gets a 400)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class SyntaxRule:
    route: re.Pattern[str]
    param: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class PolicyRow:
    package: str
    sla_class: str
    path: tuple[str, ...]


class Rules:
    def __init__(self, raw: bytes) -> None:
        self.sha256 = hashlib.sha256(raw).hexdigest()
        try:
            spec = json.loads(raw)
            self.syntax = [
                SyntaxRule(re.compile(r["route"]), str(r["param"]), re.compile(r["pattern"]))
                for r in spec["syntax"]
            ]
            self.max_tokens = int(spec["limits"]["max_tokens"])
            self.policy = [PolicyRow(p["package"], p["sla_class"], tuple(p["path"])) for p in spec["policy"]]
        except (ValueError, KeyError, TypeError, re.error) as error:
            raise RulesError(f"bad rules file: {error}") from None
        for row in self.policy:
            if row.path not in PATHS:
                raise RulesError(f"unsupported path {'→'.join(row.path)}; use one of {sorted(PATHS)}")

    @classmethod
    def load(cls, path: Path | None) -> Rules:
        raw = path.read_bytes() if path else json.dumps(DEFAULT_RULES, sort_keys=True).encode()
        return cls(raw)

    @property
    def node(self) -> str:
        return f"l1.{self.sha256[:16]}"

    def check(self, route: str, params: dict[str, Any]) -> None:
        """Raise ``RequestRefused`` for the first syntax rule the request breaks."""
        for rule in self.syntax:
            if rule.route.search(route) and rule.param in params:
                value = params[rule.param]
                if not isinstance(value, str) or not rule.pattern.search(value):
                    raise RequestRefused(rule.param, f"'{rule.param}' does not satisfy the agent's rules.")
        for name in ("max_tokens", "max_completion_tokens"):  # the format's checks made them ints
            limit = params.get(name)
            if limit is not None and limit > self.max_tokens:
                raise RequestRefused(name, f"{name} may be at most {self.max_tokens}.")

    def path_for(self, package: str, sla_class: str) -> tuple[str, ...]:
        for row in self.policy:
            if row.package in ("*", package) and row.sla_class in ("*", sla_class):
                return row.path
        return ("L1", "L2", "L3", "L1")
