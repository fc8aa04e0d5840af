"""Every message the portal and the finance views can show is in their zh-Hans catalogue, translated,
plural forms included; and the PDFs' own label tables have a Chinese text for every English one.

The messages are read from the sources the way `makemessages` finds them (Django's `templatize` for
templates, the gettext calls in Python), without the gettext tools: a message added to a template or
a view and left out of the .po fails here, not in front of a customer."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import polib
import pytest
from django.utils.translation.template import templatize

from billing import pdf as invoice_pdf
from sla import pdf as sla_pdf

ROOT = Path(__file__).resolve().parents[1]
APPS = ("frontend", "finance")
# Messages of lower layers that the app's catalogue carries (the dimensions' names: the portal's).
SHARED = {"frontend": ("platform/pricing",), "finance": ()}
SINGULAR = {"gettext", "gettext_lazy", "_", "gettext_noop"}
CONTEXT = {"pgettext", "pgettext_lazy"}
PLURAL = {"ngettext", "ngettext_lazy"}
CONTEXT_PLURAL = {"npgettext", "npgettext_lazy"}
Message = tuple[str, str]  # (context, msgid)


def _strings(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _from_python(source: str) -> Iterator[Message]:
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        texts = [_strings(a) for a in node.args]
        if name in SINGULAR | PLURAL and texts[0] is not None:
            yield "", texts[0]
        elif name in CONTEXT | CONTEXT_PLURAL and len(texts) > 1 and texts[0] is not None and texts[1]:
            yield texts[0], texts[1]


CALL = re.compile(r"\b(n?p?gettext)\(")


def _from_template(source: str) -> Iterator[Message]:
    """`templatize` turns a template into the gettext calls xgettext would read (one line each, the
    strings as Python literals), with filler letters for the rest: read each call's literals."""
    for line in templatize(source).splitlines():
        for match in CALL.finditer(line):
            call = line[match.start() :]
            args = []
            for token in tokenize.generate_tokens(io.StringIO(call).readline):
                if token.type == tokenize.STRING:
                    args.append(ast.literal_eval(token.string))
                elif token.string == ")":
                    break
            if match.group(1) in ("pgettext", "npgettext"):
                yield args[0], args[1]
            else:
                yield "", args[0]


def _used(app: str) -> set[Message]:
    found: set[Message] = set()
    for path in [p for folder in (app, *SHARED[app]) for p in (ROOT / folder).rglob("*")]:
        if "migrations" in path.parts or "locale" in path.parts:
            continue
        if path.suffix == ".py":
            found |= set(_from_python(path.read_text()))
        elif path.suffix == ".html":
            found |= set(_from_template(path.read_text()))
    return found


@pytest.mark.parametrize("app", APPS)
def test_every_message_used_is_in_the_catalogue_and_translated(app: str) -> None:
    po = polib.pofile(str(ROOT / app / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"))
    translated = {
        (e.msgctxt or "", e.msgid) for e in po if not e.obsolete and e.translated() and "fuzzy" not in e.flags
    }
    used = _used(app)
    assert len(used) > 50  # the extraction found the app's messages at all
    assert sorted(used - translated) == []


@pytest.mark.parametrize(
    "labels", [invoice_pdf.TEXT, sla_pdf.LABELS, invoice_pdf.STATUS_TEXT, invoice_pdf.PAYMENT_TEXT]
)
def test_the_pdfs_have_a_chinese_text_for_every_english_one(labels: dict[str, dict[str, str]]) -> None:
    english, chinese = labels["en"], labels["zh-Hans"]
    assert set(chinese) == set(english)
    untranslated = [k for k, v in chinese.items() if not any("\u4e00" <= ch <= "\u9fff" for ch in v)]
    assert untranslated == []
