"""The serving tree's subtrees, from ``tree-config.yaml``: checked when the router starts, each error
naming the file, the line and the setting.

```yaml
version: 1
scheduler:             # optional: the design's published parameters are the defaults
  period_s: 10
  window_s: 60
subtrees:
  finance:
    kind: inference                 # inference | training | batch
    executors: [exec-a, exec-b]     # the executors it starts with
    sla: {p99_ms: 300, max_concurrency: 8}
    isolation: shared               # shared: may lend and borrow; strict: never
    queue: 64                       # requests waiting at most (then 429)
    replicas: {min: 1, max: 8}      # the autoscaler's bounds
    fallback: cpu-small             # where requests go while this subtree's breaker is open
    priorities:                     # first match wins; '*' matches anything
      - {package: finance-qa, sla_class: gold, priority: 9}
      - {package: '*', sla_class: '*', priority: 5}
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..router import ANY, SUBTREE_NAME

KINDS = ("inference", "training", "batch")
ISOLATIONS = ("shared", "strict")
PRIORITY_RANGE = (0, 9)


class TreeConfigError(ValueError):
    """The tree config cannot be used; the message names the file, the line and the setting."""


@dataclass(frozen=True)
class PriorityRule:
    package: str
    sla_class: str
    priority: int

    def matches(self, package: str, sla_class: str) -> bool:
        return self.package in (ANY, package) and self.sla_class in (ANY, sla_class)


@dataclass(frozen=True)
class Subtree:
    name: str
    kind: str
    executors: tuple[str, ...]
    p99_ms: float
    max_concurrency: int
    isolation: str = "shared"
    queue: int = 64
    min_replicas: int = 1
    max_replicas: int = 8
    fallback: str | None = None
    priorities: tuple[PriorityRule, ...] = ()

    @property
    def lends(self) -> bool:
        return self.isolation == "shared"

    def priority(self, package: str, sla_class: str, default: int = 5) -> int:
        """The first matching rule's priority (higher is served first); ``default`` when none matches."""
        return next((r.priority for r in self.priorities if r.matches(package, sla_class)), default)


@dataclass(frozen=True)
class SchedulerSettings:
    """The design's published parameters, each overridable in the file's ``scheduler`` section."""

    period_s: float = 10.0
    window_s: float = 60.0
    borrow_above: float = 0.85  # load share
    borrow_periods: int = 3
    lender_queue_below: int = 2
    borrow_units: int = 1
    unit_executors: int = 1  # executors in one unit lent
    return_below: float = 0.70
    return_after_s: float = 15 * 60.0
    scale_up_p99_ms: float = 200.0
    scale_up_periods: int = 3
    scale_up_step: float = 0.33
    scale_up_fast_p99_ms: float = 250.0
    scale_up_fast_step: float = 1.0
    scale_down_p99_ms: float = 150.0
    scale_down_periods: int = 5
    scale_down_step: float = 0.25


@dataclass(frozen=True)
class TreeConfig:
    subtrees: dict[str, Subtree]
    settings: SchedulerSettings = field(default_factory=SchedulerSettings)

    @classmethod
    def load(cls, path: Path) -> TreeConfig:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise TreeConfigError(f"{path}: cannot read: {error.strerror}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "tree-config.yaml") -> TreeConfig:
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f":{mark.line + 1}" if mark is not None else ""
            raise TreeConfigError(f"{source}{where}: not YAML: {getattr(error, 'problem', error)}") from None
        return _Reader(source).config(root)


class _Reader:
    """Walks the composed YAML nodes, so that every error can name its line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node | None, where: str, message: str) -> TreeConfigError:
        line = f":{node.start_mark.line + 1}" if node is not None else ""
        return TreeConfigError(f"{self.source}{line}: {where}: {message}")

    def mapping(
        self, node: yaml.Node | None, where: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
    ) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, where, "must be a mapping")
        found: dict[str, yaml.Node] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name not in allowed:
                raise self.fail(key, where, f"unknown setting {name!r} (allowed: {', '.join(allowed)})")
            if name in found:
                raise self.fail(key, where, f"{name!r} is given twice")
            found[name] = value
        for name in required:
            if name not in found:
                raise self.fail(node, where, f"{name!r} is required")
        return found

    def scalar(self, node: yaml.Node, where: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, where, "must be a single value")
        return yaml.safe_load(yaml.serialize(node))

    def number(self, node: yaml.Node, where: str, *, integer: bool = False, low: float = 0) -> Any:
        value = self.scalar(node, where)
        wrong_kind = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
        if wrong_kind or value < low:
            kind = "an integer" if integer else "a number"
            raise self.fail(node, where, f"must be {kind} of at least {low}, not {value!r}")
        return value

    def text(self, node: yaml.Node, where: str, choices: tuple[str, ...] = ()) -> str:
        value = self.scalar(node, where)
        if not isinstance(value, str) or not value:
            raise self.fail(node, where, f"must be a non-empty string, not {value!r}")
        if choices and value not in choices:
            raise self.fail(node, where, f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def config(self, root: yaml.Node | None) -> TreeConfig:
        top = self.mapping(root, "the file", ("version", "scheduler", "subtrees"), ("version", "subtrees"))
        if self.scalar(top["version"], "version") != 1:
            raise self.fail(top["version"], "version", "must be 1")
        settings = self.settings(top.get("scheduler"))
        subtrees_node = top["subtrees"]
        entries = self.mapping(subtrees_node, "subtrees", tuple(self.names(subtrees_node)))
        if not entries:
            raise self.fail(subtrees_node, "subtrees", "at least one subtree is needed")
        subtrees = {name: self.subtree(name, node) for name, node in entries.items()}
        owner: dict[str, str] = {}
        for name, subtree in subtrees.items():
            given = dict((key.value, value) for key, value in entries[name].value)
            at = f"subtrees.{name}"
            if subtree.fallback is not None and subtree.fallback not in subtrees:
                raise self.fail(given["fallback"], f"{at}.fallback", f"no subtree {subtree.fallback!r}")
            if subtree.fallback == name:
                raise self.fail(given["fallback"], f"{at}.fallback", "a subtree cannot fall back to itself")
            for executor in subtree.executors:
                if executor in owner:
                    raise self.fail(
                        given["executors"],
                        f"{at}.executors",
                        f"{executor!r} is already in {owner[executor]!r}",
                    )
                owner[executor] = name
        return TreeConfig(subtrees, settings)

    def names(self, node: yaml.Node) -> list[str]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, "subtrees", "must be a mapping of subtree names")
        names = []
        for key, _ in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else ""
            if not SUBTREE_NAME.match(str(name)):
                raise self.fail(key, "subtrees", f"{name!r} is not a subtree name ({SUBTREE_NAME.pattern})")
            names.append(str(name))
        return names

    def settings(self, node: yaml.Node | None) -> SchedulerSettings:
        if node is None:
            return SchedulerSettings()
        fields = SchedulerSettings.__dataclass_fields__
        given = self.mapping(node, "scheduler", tuple(fields))
        values = {
            name: self.number(
                value, f"scheduler.{name}", integer=isinstance(getattr(SchedulerSettings, name), int)
            )
            for name, value in given.items()
        }
        return SchedulerSettings(**values)

    def subtree(self, name: str, node: yaml.Node) -> Subtree:
        at = f"subtrees.{name}"
        allowed = ("kind", "executors", "sla", "isolation", "queue", "replicas", "fallback", "priorities")
        given = self.mapping(node, at, allowed, ("kind", "executors", "sla"))
        executors_node = given["executors"]
        if not isinstance(executors_node, yaml.SequenceNode):
            raise self.fail(executors_node, f"{at}.executors", "must be a list of executor agent ids")
        executors = tuple(self.text(item, f"{at}.executors") for item in executors_node.value)
        if len(set(executors)) != len(executors):
            raise self.fail(executors_node, f"{at}.executors", "an executor is listed twice")
        sla = self.mapping(
            given["sla"], f"{at}.sla", ("p99_ms", "max_concurrency"), ("p99_ms", "max_concurrency")
        )
        replicas = self.mapping(given.get("replicas") or _EMPTY, f"{at}.replicas", ("min", "max"))
        low = self.number(replicas["min"], f"{at}.replicas.min", integer=True) if "min" in replicas else 1
        high = (
            self.number(replicas["max"], f"{at}.replicas.max", integer=True, low=1)
            if "max" in replicas
            else max(low, len(executors), 1)
        )
        if low > high:
            raise self.fail(given["replicas"], f"{at}.replicas", f"min {low} is above max {high}")
        return Subtree(
            name=name,
            kind=self.text(given["kind"], f"{at}.kind", KINDS),
            executors=executors,
            p99_ms=self.number(sla["p99_ms"], f"{at}.sla.p99_ms", low=1),
            max_concurrency=self.number(
                sla["max_concurrency"], f"{at}.sla.max_concurrency", integer=True, low=1
            ),
            isolation=self.text(given["isolation"], f"{at}.isolation", ISOLATIONS)
            if "isolation" in given
            else "shared",
            queue=self.number(given["queue"], f"{at}.queue", integer=True) if "queue" in given else 64,
            min_replicas=low,
            max_replicas=high,
            fallback=self.text(given["fallback"], f"{at}.fallback") if "fallback" in given else None,
            priorities=self.priorities(given.get("priorities"), f"{at}.priorities"),
        )

    def priorities(self, node: yaml.Node | None, at: str) -> tuple[PriorityRule, ...]:
        if node is None:
            return ()
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, at, "must be a list of {package, sla_class, priority}")
        rules = []
        for index, item in enumerate(node.value):
            where = f"{at}[{index}]"
            given = self.mapping(item, where, ("package", "sla_class", "priority"), ("priority",))
            priority = self.number(given["priority"], f"{where}.priority", integer=True)
            if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
                raise self.fail(given["priority"], f"{where}.priority", "must be 0..9 (9 is served first)")
            rules.append(
                PriorityRule(
                    self.text(given["package"], f"{where}.package") if "package" in given else ANY,
                    self.text(given["sla_class"], f"{where}.sla_class") if "sla_class" in given else ANY,
                    priority,
                )
            )
        return tuple(rules)


_EMPTY = yaml.MappingNode("tag:yaml.org,2002:map", [])
