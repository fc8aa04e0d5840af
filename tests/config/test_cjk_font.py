"""The one CJK font (common.cjk_font) comes from its pip package, has TrueType outlines that ReportLab
embeds, and a broken install answers 503 pdf_font_missing instead of a PDF with blanks."""

from __future__ import annotations

import struct
import sysconfig
from io import BytesIO
from pathlib import Path

import pytest
from reportlab.pdfgen.canvas import Canvas

from common import cjk_font
from common.cjk_font import CJK_FONT_FAMILY, CjkFontMissing, cjk_font_path, register_cjk_font
from tests.pdf_text import embedded_fonts, pdf_text


def _tables(data: bytes, index: int) -> dict[bytes, tuple[int, int]]:
    """The sfnt table directory of face `index` of a TrueType collection: tag → (offset, length)."""
    assert data[:4] == b"ttcf"
    (count,) = struct.unpack_from(">I", data, 8)
    assert index < count
    (start,) = struct.unpack_from(">I", data, 12 + 4 * index)
    (tables,) = struct.unpack_from(">H", data, start + 4)
    out = {}
    for n in range(tables):
        tag, _checksum, offset, length = struct.unpack_from(">4sIII", data, start + 12 + 16 * n)
        out[tag] = (offset, length)
    return out


def test_the_font_is_the_pip_package_s_truetype_file_not_a_system_font() -> None:
    path = cjk_font_path()
    assert path.is_file() and path.name == "wqy-microhei.ttc"
    assert path.is_relative_to(Path(sysconfig.get_paths()["purelib"]))  # site-packages, not /usr/share
    tables = _tables(path.read_bytes(), cjk_font.SUBFONT_INDEX)
    assert b"glyf" in tables and b"loca" in tables  # TrueType outlines, which ReportLab's TTFont reads
    assert b"CFF " not in tables


def test_a_pdf_drawn_in_it_embeds_it_and_reads_back_as_chinese() -> None:
    out = BytesIO()
    canvas = Canvas(out)
    canvas.setFont(register_cjk_font(), 14)
    canvas.drawString(72, 720, "发票 Invoice 应付金额 96.37 CNY")
    canvas.save()
    pdf = out.getvalue()

    assert embedded_fonts(pdf) == {CJK_FONT_FAMILY.replace(" ", "")}
    assert "发票 Invoice 应付金额 96.37 CNY" in pdf_text(pdf)


def test_registering_twice_is_the_same_font() -> None:
    assert register_cjk_font() == register_cjk_font() == cjk_font.CJK_FONT_NAME


def test_a_missing_package_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cjk_font, "FONT_PACKAGE", "no_such_font_package")
    with pytest.raises(CjkFontMissing) as raised:
        cjk_font_path()
    assert raised.value.code == "pdf_font_missing" and raised.value.http_status == 503
    assert "no_such_font_package is not installed" in raised.value.message
    assert "make install" in raised.value.message


def test_a_file_that_is_not_a_font_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.ttc"
    bogus.write_bytes(b"not a font")
    monkeypatch.setattr(cjk_font, "cjk_font_path", lambda: bogus)
    monkeypatch.setattr(cjk_font, "CJK_FONT_NAME", "TreemeterCJKBogus")
    with pytest.raises(CjkFontMissing, match="not a usable TrueType font"):
        register_cjk_font()
