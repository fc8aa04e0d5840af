"""The monthly SLA report as a PDF, in English or Simplified Chinese, with an embedded TrueType CJK font.

ReportLab's built-in CID fonts are not embedded (a viewer without Asian font packs shows blanks), so
Chinese text (and the English report's, whose names may be Chinese) uses a subset of the project's one
CJK font embedded in the file (common.cjk_font, from a pip package).
"""

from __future__ import annotations

from html import escape
from io import BytesIO
from typing import Any

from reportlab.graphics.charts.barcharts import VerticalBarChart
from reportlab.graphics.charts.legends import Legend
from reportlab.graphics.shapes import Drawing
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from common.cjk_font import register_cjk_font

from .models import SlaReport

LANGUAGES = ("en", "zh-Hans")

LABELS = {
    "en": {
        "title": "SLA report",
        "window": "Window",
        "status": "Status",
        "final": "final",
        "provisional": "provisional",
        "requests": "Requests",
        "records": "Records",
        "rejected": "Rejected (customer 4xx)",
        "excluded": "Excluded",
        "valid": "Valid",
        "objective": "Objective",
        "objectives": "Objectives",
        "target": "Target %",
        "measured": "Measured %",
        "good": "Good / eligible",
        "spent": "Budget spent %",
        "credit": "Credit %",
        "no_traffic": "no traffic",
        "percentiles": "Latency percentiles (ms)",
        "layer": "Layer",
        "daily": "Daily",
        "exclusions": "Exclusions",
        "none": "None.",
        "declared_by": "declared by",
        "detected_by": "detected by the watch of",
        "total_credit": "Service credit: {credit} % of the month's fee",
        "provenance": "Data as of {watermark}; ledger checkpoint {checkpoint}.",
        "pending": "not yet available",
    },
    "zh-Hans": {
        "title": "服务等级协议（SLA）报告",
        "window": "统计周期",
        "status": "状态",
        "final": "已结算",
        "provisional": "暂定",
        "requests": "请求",
        "records": "记录数",
        "rejected": "已拒绝（客户 4xx）",
        "excluded": "已排除",
        "valid": "有效请求",
        "objective": "目标",
        "objectives": "服务目标",
        "target": "目标值 %",
        "measured": "实测值 %",
        "good": "达标 / 计入",
        "spent": "错误预算消耗 %",
        "credit": "赔付 %",
        "no_traffic": "无流量",
        "percentiles": "延迟分位数（毫秒）",
        "layer": "层",
        "daily": "每日",
        "exclusions": "排除项",
        "none": "无。",
        "declared_by": "声明人",
        "detected_by": "依赖监测自动发现：",
        "total_credit": "服务赔付：当月费用的 {credit} %",
        "provenance": "数据截至 {watermark}；账本检查点 {checkpoint}。",
        "pending": "暂不可用",
    },
}


SERIES_COLOURS = ("#33aa77", "#3366cc", "#dd8833", "#aa44aa", "#888888")


def daily_series(report: SlaReport) -> list[list[float | None]]:
    """Each objective's daily percentage, in the report's objective order; None for a day without
    traffic (no bar: nothing was measured, which is not 100 %)."""
    series = []
    for objective in report.objectives:
        values: list[float | None] = []
        for day in report.daily:
            percent = day["objectives"].get(objective["name"], {}).get("percent")
            values.append(None if percent is None else float(percent))
        series.append(values)
    return series


def _daily_chart(report: SlaReport, font: str) -> Drawing:
    """Grouped bars: one series per objective, one group per local day, with a legend."""
    drawing = Drawing(170 * mm, 62 * mm)
    chart = VerticalBarChart()
    chart.x, chart.y, chart.width, chart.height = 12 * mm, 8 * mm, 150 * mm, 42 * mm
    series = daily_series(report)
    measured = [v for values in series for v in values if v is not None]
    chart.data = series or [[0.0]]
    chart.valueAxis.valueMin = max(0.0, min(min(measured, default=100.0), 99.0) - 1)
    chart.valueAxis.valueMax = 100.0
    chart.categoryAxis.categoryNames = [d["day"][-2:] for d in report.daily]
    chart.categoryAxis.labels.fontName = chart.valueAxis.labels.fontName = font
    chart.categoryAxis.labels.fontSize = 6
    chart.barSpacing, chart.groupSpacing = 0, 2
    legend = Legend()
    legend.x, legend.y = 14 * mm, 58 * mm
    legend.fontName, legend.fontSize, legend.columnMaximum = font, 7, 1
    legend.deltax, legend.dx, legend.dy = 45 * mm, 6, 6
    legend.alignment = "right"
    pairs = []
    for k, objective in enumerate(report.objectives):
        colour = colors.HexColor(SERIES_COLOURS[k % len(SERIES_COLOURS)])
        chart.bars[k].fillColor = colour
        chart.bars[k].strokeColor = None
        pairs.append((colour, f"{objective['name']} ({objective['layer']})"))
    legend.colorNamePairs = pairs
    drawing.add(chart)
    drawing.add(legend)
    return drawing


def render_report_pdf(report: SlaReport, language: str) -> bytes:
    """The report as PDF bytes in `language` ('en' or 'zh-Hans')."""
    if language not in LANGUAGES:
        raise ValueError(f"unsupported language {language!r}")
    text = LABELS[language]
    font = register_cjk_font()
    body = ParagraphStyle("body", fontName=font, fontSize=9, leading=13, wordWrap="CJK")
    heading = ParagraphStyle("heading", parent=body, fontSize=15, leading=20, spaceAfter=6)
    subheading = ParagraphStyle("subheading", parent=body, fontSize=11, leading=16, spaceBefore=8)
    grid = TableStyle(
        [
            ("FONTNAME", (0, 0), (-1, -1), font),
            ("FONTSIZE", (0, 0), (-1, -1), 8),
            ("GRID", (0, 0), (-1, -1), 0.3, colors.grey),
            ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#eeeeee")),
        ]
    )
    status = text["final"] if report.status == SlaReport.Status.FINAL else text["provisional"]
    first, last = report.local_days
    story: list = [
        Paragraph(f"{text['title']}: {report.contract.code} · {report.month}", heading),
        Paragraph(
            f"{text['window']}: {first:%Y-%m-%d} – {last:%Y-%m-%d} ({report.time_zone}; "
            f"{report.period_start:%Y-%m-%d %H:%M} – {report.period_end:%Y-%m-%d %H:%M} UTC) · "
            f"{text['status']}: {status}",
            body,
        ),
        Paragraph(text["requests"], subheading),
        Table(
            [
                [text["records"], text["rejected"], text["excluded"], text["valid"]],
                [report.record_count, report.rejected_count, report.excluded_count, report.valid_count],
            ],
            style=grid,
        ),
        Paragraph(text["objectives"], subheading),
        Table(
            [
                [
                    text["objective"],
                    text["layer"],
                    "ms",
                    text["target"],
                    text["measured"],
                    text["good"],
                    text["spent"],
                    text["credit"],
                ]
            ]
            + [
                [
                    o["name"],
                    o["layer"],
                    o["threshold_ms"] or "",
                    o["target_percent"],
                    o["measured_percent"] or text["no_traffic"],
                    f"{o['good']} / {o['eligible']}",
                    o["budget_spent_percent"] or "",
                    o["credit_percent"],
                ]
                for o in report.objectives
            ],
            style=grid,
        ),
        Spacer(1, 4),
        Paragraph(text["total_credit"].format(credit=report.credit_percent.normalize()), body),
        Paragraph(text["percentiles"], subheading),
        Table(
            [[text["layer"], "p50", "p90", "p95", "p99", "p99.9"]]
            + [
                [layer, *(points.values() if points else [text["no_traffic"], "", "", "", ""])]
                for layer, points in report.percentiles_ms.items()
            ],
            style=grid,
        ),
        Paragraph(text["daily"], subheading),
        _daily_chart(report, font),
        Paragraph(text["exclusions"], subheading),
    ]
    if report.exclusions:
        story += [
            Paragraph(
                f"{x['kind']} ({x['scope']}): {x['starts_at']} – {x['ends_at']}: {escape(x['reason'])} "
                f"({_who(x, text)})",
                body,
            )
            for x in report.exclusions
        ]
    else:
        story.append(Paragraph(text["none"], body))
    watermark = f"{report.data_watermark:%Y-%m-%d %H:%M:%S} UTC" if report.data_watermark else "–"
    story.append(Spacer(1, 6))
    story.append(
        Paragraph(
            text["provenance"].format(
                watermark=watermark, checkpoint=report.ledger_checkpoint or text["pending"]
            ),
            body,
        )
    )
    out = BytesIO()
    SimpleDocTemplate(
        out,
        pagesize=A4,
        title=f"SLA {report.contract.code} {report.month}",
        leftMargin=15 * mm,
        rightMargin=15 * mm,
    ).build(story)
    return out.getvalue()


def _who(exclusion: dict[str, Any], text: dict[str, str]) -> str:
    """Who opened an exclusion: the person who declared it, or the dependency watch that detected it."""
    if exclusion.get("detected_by"):
        return f"{text['detected_by']} {escape(exclusion['detected_by'])}"
    return f"{text['declared_by']} {escape(exclusion['declared_by'])}"
