"""L1: a deterministic rules engine, loaded once from one rules bundle whose hash goes into every record.

Three stages. Syntax: a regex per route and request parameter (``check``). Semantics: when the bundle
holds a ``classifier`` section (written by ``python -m compute_agents.classifier train``), the prompt's
business domain and a confidence (docs/classifier.md). Policy: a table that maps (domain, package, SLA
class) to the path a request takes through the tree and the subtree that serves it; the first matching
row wins and ``*`` matches anything. Below the classifier's threshold the request takes the L2
confirmation path whatever the table says, and the decision says so. The bundle's SHA-256 is carried in
each record's L1 hop node (``l1.<16 hex>``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compute_agents.classifier import ClassifierError, DomainClassifier
from compute_agents.default_rules import DEFAULT_RULES

L2_CONFIRMATION = ("L1", "L2", "L3", "L1")
PATHS = {L2_CONFIRMATION, ("L1", "L3", "L1")}
ANY = "*"
DEFAULT_SUBTREE = "default"
SUBTREE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")  # a record slug: it goes into the decision


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
    domain: str = ANY
    subtree: str = DEFAULT_SUBTREE
    queued: bool = False  # the asynchronous tier: the request waits in the durable queue (202, a job)

    def matches(self, domain: str | None, package: str, sla_class: str) -> bool:
        return (
            self.domain in (ANY, domain)
            and self.package in (ANY, package)
            and self.sla_class in (ANY, sla_class)
        )


@dataclass(frozen=True)
class Decision:
    """What L1 decided for one request. ``domain`` and ``confidence`` are None without a classifier;
    ``l2_confirmation`` is set when the confidence was below the threshold and the path forced via L2;
    ``early_exit`` when the classifier decided on its encoder's first layers (the router's own count:
    it is not among the signed claims, nor kept on disk)."""

    domain: str | None
    confidence: float | None
    path: tuple[str, ...]
    subtree: str
    l2_confirmation: bool
    queued: bool = False
    fallback_from: str | None = None  # the subtree chosen, when its breaker sent the request to ``subtree``
    early_exit: bool = False

    def as_json(self) -> dict[str, Any]:
        """What a decision kept on disk holds (a job waiting, a request in flight)."""
        kept = {
            "domain": self.domain,
            "confidence": self.confidence,
            "path": list(self.path),
            "subtree": self.subtree,
            "l2_confirmation": self.l2_confirmation,
        }
        return kept if self.fallback_from is None else {**kept, "fallback_from": self.fallback_from}

    @classmethod
    def from_json(cls, kept: dict[str, Any]) -> Decision:
        return cls(
            kept["domain"],
            kept["confidence"],
            tuple(kept["path"]),
            kept["subtree"],
            kept["l2_confirmation"],
            fallback_from=kept.get("fallback_from"),
        )


NO_MATCH = PolicyRow(ANY, ANY, L2_CONFIRMATION)


def _policy_row(number: int, raw: Any) -> PolicyRow:
    if not isinstance(raw, dict):
        raise RulesError(f"policy row {number} must be a JSON object")
    fields = {}
    for key, default in (
        ("package", None),
        ("sla_class", None),
        ("domain", ANY),
        ("subtree", DEFAULT_SUBTREE),
    ):
        value = raw.get(key, default)
        if not isinstance(value, str) or not value:
            raise RulesError(f"policy row {number}: '{key}' must be a non-empty string")
        fields[key] = value
    path = raw.get("path")
    if not isinstance(path, list) or tuple(path) not in PATHS:
        shown = "→".join(map(str, path)) if isinstance(path, list) else repr(path)
        raise RulesError(f"policy row {number}: unsupported path {shown}; use one of {sorted(PATHS)}")
    if not SUBTREE_NAME.match(fields["subtree"]):
        raise RulesError(
            f"policy row {number}: subtree {fields['subtree']!r} must match {SUBTREE_NAME.pattern}"
        )
    queued = raw.get("queued", False)
    if not isinstance(queued, bool):
        raise RulesError(f"policy row {number}: 'queued' must be true or false")
    return PolicyRow(path=tuple(path), queued=queued, **fields)


def _check_domains(policy: list[PolicyRow], classifier: DomainClassifier | None) -> None:
    labels = set(classifier.labels) if classifier else set()
    for number, row in enumerate(policy, 1):
        if row.domain == ANY or row.domain in labels:
            continue
        if classifier is None:
            raise RulesError(
                f"policy row {number} names domain {row.domain!r} but the rules file has no classifier"
            )
        raise RulesError(
            f"policy row {number}: unknown domain {row.domain!r}; the classifier's labels are "
            f"{', '.join(sorted(labels))}"
        )


def _classifier(spec: Any, base: Path | None) -> DomainClassifier | None:
    if spec is None:
        return None
    if base is None:
        raise RulesError("a rules bundle with a classifier must be loaded from its file (Rules.load)")
    try:
        return DomainClassifier.from_spec(spec, base)
    except ClassifierError as error:
        raise RulesError(f"bad rules file: {error}") from None


class Rules:
    """``raw`` is the bundle's bytes; ``base`` the directory its classifier's files are relative to."""

    def __init__(self, raw: bytes, base: Path | None = None) -> None:
        self.sha256 = hashlib.sha256(raw).hexdigest()
        try:
            spec = json.loads(raw)
            self.syntax = [
                SyntaxRule(re.compile(r["route"]), str(r["param"]), re.compile(r["pattern"]))
                for r in spec["syntax"]
            ]
            self.max_tokens = int(spec["limits"]["max_tokens"])
            rows = spec["policy"]
        except (ValueError, KeyError, TypeError, re.error) as error:
            raise RulesError(f"bad rules file: {error}") from None
        if not isinstance(rows, list):
            raise RulesError("bad rules file: 'policy' must be a JSON list")
        self.policy = [_policy_row(number, row) for number, row in enumerate(rows, 1)]
        self.classifier = _classifier(spec.get("classifier"), base)
        _check_domains(self.policy, self.classifier)

    @classmethod
    def load(cls, path: Path | None) -> Rules:
        if path is None:
            return cls(json.dumps(DEFAULT_RULES, sort_keys=True).encode())
        return cls(path.read_bytes(), path.resolve().parent)

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

    def _row(self, domain: str | None, package: str, sla_class: str) -> PolicyRow:
        return next((row for row in self.policy if row.matches(domain, package, sla_class)), NO_MATCH)

    def decide(self, text: str, package: str, sla_class: str) -> Decision:
        """Classify ``text`` (when the bundle has a classifier) and look the policy up.

        Below the threshold the tentative domain still picks the row (its subtree), but the path is
        forced through L2, which confirms the domain."""
        if self.classifier is None:
            row = self._row(None, package, sla_class)
            return Decision(None, None, row.path, row.subtree, l2_confirmation=False, queued=row.queued)
        found = self.classifier.classify(text)
        row = self._row(found.domain, package, sla_class)
        unsure = found.confidence < self.classifier.threshold
        path = L2_CONFIRMATION if unsure else row.path
        return Decision(
            found.domain,
            found.confidence,
            path,
            row.subtree,
            l2_confirmation=unsure,
            queued=row.queued,
            early_exit=found.early,
        )

    def path_for(self, package: str, sla_class: str) -> tuple[str, ...]:
        """The path without looking at the prompt: the first row for any domain (``*``)."""
        return self._row(None, package, sla_class).path


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        ]
    return []


def classifiable_text(body: dict[str, Any]) -> str:
    """The text the classifier reads: a chat body's user messages (string content, or the text parts of
    a content list) joined by newlines; a completion's prompt (a string, or the first string of a
    list); otherwise ``""``."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "\n".join(
            text
            for message in messages
            if isinstance(message, dict) and message.get("role") == "user"
            for text in _texts(message.get("content"))
        )
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return next((item for item in prompt if isinstance(item, str)), "")
    return ""
