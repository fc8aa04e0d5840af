"""The industry templates: one JSON file each in `templates/`, the only list of them. A template holds a
package declaration without its codes (`spec`), which the customer's own declaration is merged over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .errors import FactoryError

DIRECTORY = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True)
class Template:
    code: str
    industry: str
    name: dict[str, str]  # by language code: en, zh-hans
    description: dict[str, str]
    spec: dict[str, Any]

    def name_in(self, language: str) -> str:
        return self.name.get(language.lower(), self.name["en"])

    def description_in(self, language: str) -> str:
        return self.description.get(language.lower(), self.description["en"])


@cache
def templates() -> tuple[Template, ...]:
    found = []
    for path in sorted(DIRECTORY.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        found.append(
            Template(data["code"], data["industry"], data["name"], data["description"], data["spec"])
        )
    return tuple(found)


def template(code: str) -> Template:
    for found in templates():
        if found.code == code:
            return found
    raise FactoryError(
        "template_not_found",
        f"No industry template {code!r}; the templates are {', '.join(t.code for t in templates())}.",
        {"template": code, "templates": [t.code for t in templates()]},
    )
