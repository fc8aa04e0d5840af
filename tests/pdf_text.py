"""A PDF read back as text in Python (pypdf, a dev dependency): what a reader copies out of the file,
through the embedded font's ToUnicode map. No poppler's pdftotext from apt needed."""

from __future__ import annotations

import re
from io import BytesIO

from pypdf import PdfReader


def pdf_text(pdf: bytes) -> str:
    """Every page's text, in page order."""
    return "\n".join(page.extract_text() for page in PdfReader(BytesIO(pdf)).pages)


def embedded_fonts(pdf: bytes) -> set[str]:
    """The names of the fonts embedded in the file (a FontFile, FontFile2 or FontFile3 stream), without
    the subset tag and ReportLab's subset number: "WenQuanYiMicroHei" for "AAAAAA+WenQuanYiMicroHei-0"."""
    names = set()
    for page in PdfReader(BytesIO(pdf)).pages:
        resources = page.get("/Resources")
        fonts = resources.get_object().get("/Font") if resources is not None else None
        for ref in (fonts.get_object() if fonts is not None else {}).values():
            font = ref.get_object()
            for descendant in font.get("/DescendantFonts", [font]):
                descriptor = descendant.get_object().get("/FontDescriptor")
                if descriptor is None:
                    continue
                descriptor = descriptor.get_object()
                if any(key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3")):
                    name = str(descriptor["/FontName"]).lstrip("/").split("+", 1)[-1]
                    names.add(re.sub(r"-\d+$", "", name))
    return names
