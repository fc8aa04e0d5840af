"""The one CJK font of every PDF (invoices, SLA reports) and of the portal's browser test.

WenQuanYi Micro Hei (文泉驿微米黑), TrueType (glyf) outlines, from the `paperang-p2-fonts-cjk` wheel, a
main dependency: `make install` (pip) brings it, so no machine needs an apt font package. ReportLab embeds
a subset of it in each PDF (`/FontFile2`). Not ReportLab's CID font STSong-Light, which is not embedded
(viewers without Asian font packs show blanks), and not a CFF-based Noto CJK OTF, which ReportLab's
TTFont cannot read. The font's own licence (its name table): Apache License 2.0; embedding allowed.
"""

from __future__ import annotations

import threading
from importlib.resources import files
from pathlib import Path

from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFError, TTFont

from common.errors import ApiError

FONT_PACKAGE = "paperang_p2_fonts_cjk"
FONT_FILE = "fonts/wqy-microhei.ttc"
SUBFONT_INDEX = 0  # the collection's proportional face; 1 is "WenQuanYi Micro Hei Mono"
CJK_FONT_FAMILY = "WenQuanYi Micro Hei"  # the family name inside the file (what a browser reports)
CJK_FONT_NAME = "TreemeterCJK"  # the name the PDFs use for it in ReportLab

_registering = threading.Lock()


class CjkFontMissing(ApiError):
    """The font package is not installed or its file is gone: a broken install, not the customer's doing."""

    http_status = 503

    def __init__(self, detail: str) -> None:
        super().__init__(
            "pdf_font_missing",
            f"The PDF font is missing ({detail}): reinstall the dependencies (`make install`).",
        )


def cjk_font_path() -> Path:
    """The font file, from the installed package; raises CjkFontMissing when the install is broken."""
    try:
        path = Path(str(files(FONT_PACKAGE).joinpath(FONT_FILE)))
    except ModuleNotFoundError as error:
        raise CjkFontMissing(f"the Python package {FONT_PACKAGE} is not installed") from error
    if not path.is_file():
        raise CjkFontMissing(f"{path} does not exist")
    return path


def register_cjk_font() -> str:
    """Register the font with ReportLab once per process; return the name to use in styles."""
    with _registering:
        if CJK_FONT_NAME not in pdfmetrics.getRegisteredFontNames():
            path = cjk_font_path()
            try:
                font = TTFont(CJK_FONT_NAME, str(path), subfontIndex=SUBFONT_INDEX)
            except TTFError as error:
                raise CjkFontMissing(f"{path} is not a usable TrueType font: {error}") from error
            pdfmetrics.registerFont(font)
    return CJK_FONT_NAME
