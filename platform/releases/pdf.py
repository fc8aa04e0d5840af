"""A gray-release stage's report as a PDF, in English or Simplified Chinese (the portal's translations),
with the project's CJK font embedded (common.cjk_font), as the SLA reports are."""

from __future__ import annotations

from decimal import Decimal
from html import escape
from io import BytesIO

from django.utils import translation
from django.utils.translation import gettext as _
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from common.cjk_font import register_cjk_font

from .selectors import StageReport

LANGUAGES = ("en", "zh-Hans")


def percent(share: Decimal | None) -> str:
    """A share as a percentage to two places; "—" without calls."""
    return "—" if share is None else f"{share * 100:.2f} %"


def render_stage_pdf(report: StageReport, language: str) -> bytes:
    """The stage's report: resources used, SLA attainment, the acceptance metric and the staff notes."""
    font = register_cjk_font()
    body = ParagraphStyle("body", fontName=font, fontSize=9, leading=13, wordWrap="CJK")
    heading = ParagraphStyle("heading", parent=body, fontSize=15, leading=20, spaceAfter=6)
    subheading = ParagraphStyle("subheading", parent=body, fontSize=11, leading=16, spaceBefore=8)
    with translation.override(language if language in LANGUAGES else "en"):
        stage, plan = report.stage, report.plan
        story: list[object] = [
            Paragraph(escape(_("Gray-release report")), heading),
            Paragraph(
                escape(f"{plan.name} ({plan.code}) · {plan.contract.code} · {plan.package.code}"), body
            ),
            Paragraph(
                escape(_("Stage %(position)s: %(name)s") % {"position": stage.position, "name": stage.name}),
                body,
            ),
            Paragraph(escape(f"{report.start.isoformat()} – {report.end.isoformat()} UTC"), body),
            Paragraph(
                escape(_("Billing on") if stage.billing_on else _("Billing off: gray usage, not billed")),
                body,
            ),
            Spacer(1, 4 * mm),
            Paragraph(escape(_("Resources used")), subheading),
            _table(
                font,
                [
                    _("Capability"),
                    _("Calls"),
                    _("Refused"),
                    _("Tokens or items in"),
                    _("Out"),
                    _("GPU (L3) seconds"),
                ],
                [
                    [
                        c.capability,
                        c.figures.calls,
                        c.figures.rejected,
                        c.figures.tokens_in,
                        c.figures.tokens_out,
                        c.l3_seconds,
                    ]
                    for c in report.capabilities
                ],
            ),
            Paragraph(escape(_("SLA attainment")), subheading),
            _table(
                font,
                [
                    _("Capability"),
                    _("SLA timeout (ms)"),
                    _("Within the timeout"),
                    _("Availability"),
                    _("p99 (ms)"),
                ],
                [
                    [
                        c.capability,
                        c.sla_timeout_ms,
                        percent(c.within_sla),
                        percent(c.availability),
                        f"{c.figures.p99_latency_ms:.1f}",
                    ]
                    for c in report.capabilities
                ],
            ),
            Paragraph(escape(_("Acceptance")), subheading),
            _table(
                font,
                [_("Capability"), _("Acceptance rule"), _("Accepted"), _("Acceptance rate")],
                [
                    [
                        c.capability,
                        c.rule or "—",
                        f"{c.figures.accepted} / {c.figures.calls}",
                        percent(c.acceptance),
                    ]
                    for c in report.capabilities
                ],
            ),
            Paragraph(
                escape(
                    _("Gate: at least %(share)s accepted over at least %(calls)s calls per gated capability.")
                    % {"share": percent(stage.gate_min_acceptance), "calls": stage.gate_min_calls}
                ),
                body,
            ),
            Paragraph(escape(_("Staff notes")), subheading),
            *(
                [
                    Paragraph(escape(f"{n.created_at:%Y-%m-%d %H:%M} UTC — {n.text}"), body)
                    for n in stage.notes.all()
                ]
                or [Paragraph(escape(_("None.")), body)]
            ),
        ]
    buffer = BytesIO()
    SimpleDocTemplate(buffer, pagesize=A4, title=f"{plan.code}-{stage.position}").build(story)
    return buffer.getvalue()


def _table(font: str, header: list[str], rows: list[list[object]]) -> Table:
    table = Table([header, *[[str(cell) for cell in row] for row in rows]], hAlign="LEFT")
    table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, -1), font),
                ("FONTSIZE", (0, 0), (-1, -1), 8),
                ("LINEBELOW", (0, 0), (-1, 0), 0.5, "#888888"),
            ]
        )
    )
    return table
