"""The zh-Hans catalogue is complete, and the committed .mo is exactly the compiled .po."""

from __future__ import annotations

from pathlib import Path

import polib

LOCALE = Path(__file__).resolve().parents[2] / "frontend" / "locale" / "zh_Hans" / "LC_MESSAGES"


def _entries(catalogue: polib._BaseFile) -> dict[tuple[str, str], object]:
    return {
        (e.msgctxt or "", e.msgid): (e.msgstr_plural and dict(e.msgstr_plural)) or e.msgstr
        for e in catalogue
        if e.msgid and not e.obsolete
    }


def test_every_message_has_a_chinese_translation() -> None:
    po = polib.pofile(str(LOCALE / "django.po"))
    assert po.metadata["Language"] == "zh_Hans" and not po.metadata_is_fuzzy
    untranslated = [e.msgid for e in po if not e.obsolete and (not e.translated() or "fuzzy" in e.flags)]
    assert untranslated == []
    assert len(po) > 200
    chinese = [e for e in po if any("\u4e00" <= ch <= "\u9fff" for ch in e.msgstr or e.msgstr_plural[0])]
    assert len(chinese) >= len(po) - 5  # the rest are names kept as is (Webhooks, …)


def test_the_committed_mo_matches_the_po() -> None:
    po = polib.pofile(str(LOCALE / "django.po"))
    mo = polib.mofile(str(LOCALE / "django.mo"))
    assert _entries(mo) == _entries(po)
    assert mo.metadata["Plural-Forms"] == po.metadata["Plural-Forms"]
