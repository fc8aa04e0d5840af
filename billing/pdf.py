"""Invoice PDFs in English or Simplified Chinese (ReportLab, with an embedded TrueType CJK font).

ReportLab's built-in CID font STSong-Light is not embedded, so viewers without Asian font packs show
blanks; we embed a subset of the one CJK font of the project (common.cjk_font, from a pip package).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from html import escape
from io import BytesIO
from typing import Any

from django.utils import translation
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import mm
from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

from common.cjk_font import register_cjk_font
from common.money import format_unit_price
from ledger.selectors import b64
from pricing.errors import InvalidRequest

from .exports import invoice_checkpoint
from .models import Invoice, InvoiceLine, Note
from .parties import BUYER_DETAIL_NAMES
from .selectors import charge_groups, tax_breakdown

TEXT = {
    "en": {
        "invoice": "Invoice",
        "draft": "Draft invoice (not final)",
        "customer": "Customer",
        "issuer": "Issuer",
        "buyer": "Buyer",
        "tax_id": "Taxpayer ID",
        "bank": "Bank",
        "not_given": "Not given",
        "issued_on": "Issued",
        "due_on": "Due",
        "terms": "payment terms {days} days",
        "payment": "Payment",
        "credit_note": "Credit note",
        "debit_note": "Debit note",
        "corrects": "Corrects invoice",
        "on_line": "Line",
        "reason": "Reason",
        "date": "Date",
        "note_amount": "Amount",
        "due_after": "Amount due on the invoice after its credit notes",
        "debit_charged": "Charged on its own, in addition to the invoice",
        "contract": "Contract",
        "period": "Period (UTC, end exclusive)",
        "status": "Status",
        "item": "Item",
        "quantity": "Quantity",
        "unit_price": "Unit price",
        "amount": "Amount",
        "subtotal": "Subtotal",
        "tax": "Tax",
        "on": "on",
        "tax_inclusive": "Tax (included)",
        "total": "Total",
        "credits": "Prepaid credits",
        "credit_notes": "Credit notes",
        "due": "Amount due",
        "checkpoint": "Ledger checkpoint",
        "none": "not yet published (the next signed checkpoint covers these records)",
        "records": "Records billed: {records} (in the ledger: {logged}, excluded: {excluded})",
        "gaps": "Sequence gaps in the serving agents: {gaps}",
        "no_gaps": "none: every record the agents reported has arrived",
        "rounding": "Each line is rounded once, half up, to the currency's minor unit.",
    },
    "zh-Hans": {
        "invoice": "发票",
        "draft": "发票草稿（未定稿）",
        "customer": "客户",
        "issuer": "开票方",
        "buyer": "购买方",
        "tax_id": "纳税人识别号",
        "bank": "开户行及账号",
        "not_given": "未提供",
        "issued_on": "开票日期",
        "due_on": "到期日",
        "terms": "付款期限 {days} 天",
        "payment": "付款状态",
        "credit_note": "贷项通知单",
        "debit_note": "借项通知单",
        "corrects": "更正发票",
        "on_line": "明细行",
        "reason": "原因",
        "date": "日期",
        "note_amount": "金额",
        "due_after": "扣除贷项通知单后该发票的应付金额",
        "debit_charged": "单独收取，附加于该发票",
        "contract": "合同",
        "period": "账期（UTC，结束时间不含）",
        "status": "状态",
        "item": "项目",
        "quantity": "数量",
        "unit_price": "单价",
        "amount": "金额",
        "subtotal": "小计",
        "tax": "税额",
        "on": "计税基础",
        "tax_inclusive": "税额（已含）",
        "total": "合计",
        "credits": "预付额度抵扣",
        "credit_notes": "贷项通知单",
        "due": "应付金额",
        "checkpoint": "账本检查点",
        "none": "尚未发布（下一个签名检查点将覆盖这些记录）",
        "records": "计费记录数：{records}（账本中：{logged}，已排除：{excluded}）",
        "gaps": "服务代理的序号缺口：{gaps}",
        "no_gaps": "无：代理报告的每条记录均已到达",
        "rounding": "每行金额按币种最小单位四舍五入一次。",
    },
}


# Chinese names of the built-in dimensions and line kinds (other lines keep their description).
ZH_ITEMS = {
    "requests": "请求数",
    "tokens_in": "输入 token",
    "tokens_out": "输出 token",
    "cached_tokens": "前缀缓存命中 token",
    "expert_tokens": "专家 token 激活",
    "routing_hops": "路由跳数",
    "l2_misses": "专家缓存未命中 (L2)",
    "l3_seconds": "GPU 时间 (L3 秒)",
    "distinct_experts": "每请求不同专家数",
    "outcomes": "已验证结果",
    "base_fee": "基础费",
    "commitment": "最低承诺补足",
    "discount": "折扣",
    "adjustment": "迟到用量调整",
    "service_credit": "SLA 服务赔偿",
}


def _item(line: InvoiceLine, language: str) -> str:
    if language != "zh-Hans":
        return line.description
    if line.kind == "usage" and line.dimension in ZH_ITEMS:
        return ZH_ITEMS[line.dimension] + _price_segment_zh(line.details)
    return f"{ZH_ITEMS.get(line.kind, '')} {line.description}".strip()


def _price_segment_zh(details: dict[str, Any]) -> str:
    """A price version's dates, or the period bound line of a dimension whose price changed
    (billing.rating.rate_versions); empty for an ordinary line."""
    if "segment_start" in details:
        start, end = (datetime.fromisoformat(details[k]) for k in ("segment_start", "segment_end"))
        return f" ({start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC)"
    if "rated" in details:
        return " 期间最低额" if details.get("bound") == "minimum" else " 期间最高额"
    return ""


GROUP_TEXT = {
    "en": {
        "title": "Usage charges by kind",
        "routing": "Routing fee",
        "experts": "Expert fee",
        "cache": "Cache compensation",
        "outcomes": "Verified outcomes",
        "other": "Other usage",
    },
    "zh-Hans": {
        "title": "按用途汇总的用量费用",
        "routing": "路由费",
        "experts": "专家费",
        "cache": "缓存补偿",
        "outcomes": "已验证结果",
        "other": "其他用量",
    },
}


def _charge_groups(invoice: Invoice, language: str, font: str) -> list[Any]:
    """The usage lines added up per charge group (billing.selectors.charge_groups), as on the page."""
    groups = charge_groups(invoice)
    if not groups:
        return []
    text = GROUP_TEXT[language]
    rows = [[text[g.group], f"{g.amount:,}"] for g in groups]
    table = Table(rows, colWidths=[60 * mm, 35 * mm])
    table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, -1), font),
                ("FONTSIZE", (0, 0), (-1, -1), 9),
                ("ALIGN", (1, 0), (1, -1), "RIGHT"),
            ]
        )
    )
    heading = ParagraphStyle("group", fontName=font, fontSize=10, leading=14)
    return [Spacer(1, 4 * mm), Paragraph(f"{text['title']} ({invoice.currency})", heading), table]


PAYMENT_TEXT = {
    "en": {"due": "due", "overdue": "overdue", "settled": "settled by credits", "paid": "paid"},
    "zh-Hans": {"due": "待付款", "overdue": "已逾期", "settled": "已由抵扣结清", "paid": "已支付"},
}
STATUS_TEXT = {
    "en": {"draft": "draft", "grace": "grace period", "finalized": "final", "paid": "paid", "void": "void"},
    "zh-Hans": {
        "draft": "草稿",
        "grace": "宽限期",
        "finalized": "已定稿",
        "paid": "已支付",
        "void": "已作废",
    },
}


def _checkpoint(invoice: Invoice) -> str:
    """The checkpoint covering the invoice's records, as the dispute evidence and the verifier name it."""
    checkpoint = invoice_checkpoint(invoice)
    return "" if checkpoint is None else f"{checkpoint.size} / {b64(bytes(checkpoint.root_hash))}"


def _completeness(invoice: Invoice, t: dict[str, str]) -> list[str]:
    """The record count and gaps pinned at finalisation (billing.services.completeness_statement)."""
    stated = invoice.terms.get("completeness")
    if not stated:
        return []
    gaps = ", ".join(f"{g['agent_id']} #{g['first_seq']}–{g['last_seq']}" for g in stated["gaps"])
    return [
        t["records"].format(
            records=stated["records"], logged=stated["logged_records"], excluded=stated["excluded_records"]
        ),
        t["gaps"].format(gaps=gaps or t["no_gaps"]),
    ]


def _detail_names(missing: list[str], language: str) -> str:
    """The buyer details an issuer requires and the tenant has not given, in the PDF's language."""
    with translation.override("zh-hans" if language == "zh-Hans" else "en"):
        return ", ".join(str(BUYER_DETAIL_NAMES[name]) for name in missing)


def _parties(invoice: Invoice, t: dict[str, str], language: str) -> list[str]:
    """Issuer, buyer, issue and due dates and the payment status, as pinned at finalisation."""
    parties = invoice.parties
    if not parties:
        return []

    def party(role: str) -> str:
        who = parties[role]
        bank = " ".join(x for x in (who.get("bank_name"), who.get("bank_account")) if x)
        details = [
            d
            for d in (
                who["address"],
                f"{t['tax_id']} {who['tax_id']}" if who["tax_id"] else "",
                f"{t['bank']} {bank}" if bank else "",
                f"{t['not_given']}: {_detail_names(who['missing'], language)}" if who.get("missing") else "",
            )
            if d
        ]
        return f"{t[role]}: {' · '.join([who['legal_name'], *details])}"

    payment = PAYMENT_TEXT[language].get(invoice.payment_status, invoice.payment_status)
    dates = (
        f"{t['issued_on']}: {parties['issued_on']} · {t['due_on']}: {parties['due_on']} "
        f"({t['terms'].format(days=parties['payment_terms_days'])}) · {t['payment']}: {payment}"
    )
    return [party("issuer"), party("buyer"), dates]


def _document(buffer: BytesIO, title: str) -> SimpleDocTemplate:
    """An A4 page with 15 mm margins, the invoice's and the notes' layout."""
    margin = 15 * mm
    return SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=margin,
        rightMargin=margin,
        topMargin=margin,
        bottomMargin=margin,
        title=title,
    )


def _money(amount: Decimal, currency: str) -> str:
    return f"{amount:,} {currency}"


def render_invoice_pdf(invoice: Invoice, language: str = "en") -> bytes:
    """The invoice as PDF bytes: header, itemised lines, tax, totals, credits, checkpoint reference."""
    if language not in TEXT:
        raise InvalidRequest("unsupported_language", f"Use one of {', '.join(TEXT)}, not {language!r}.")
    font = register_cjk_font()
    t = TEXT[language]
    body = ParagraphStyle("body", fontName=font, fontSize=9, leading=12)
    title = ParagraphStyle("title", fontName=font, fontSize=16, leading=20)
    buffer = BytesIO()
    document = _document(buffer, f"{t['invoice']} {invoice.number or invoice.pk}")
    heading = f"{t['invoice']} {invoice.number}" if invoice.number else t["draft"]
    tenant = invoice.tenant
    facts = [
        f"{t['customer']}: {tenant.name} ({tenant.code})",
        f"{t['contract']}: {invoice.contract.code}",
        f"{t['period']}: {invoice.period_start:%Y-%m-%d} – {invoice.period_end:%Y-%m-%d}",
        f"{t['status']}: {STATUS_TEXT[language].get(invoice.status, invoice.status)}",
        f"{t['checkpoint']}: {_checkpoint(invoice) or t['none']}",
        *_parties(invoice, t, language),
        *_completeness(invoice, t),
    ]
    currency = invoice.currency
    rows: list[list[object]] = [[t["item"], t["quantity"], t["unit_price"], f"{t['amount']} ({currency})"]]
    for line in invoice.lines.all():
        rows.append(
            [
                Paragraph(_item(line, language), body),
                f"{line.quantity.normalize():,f}",
                format_unit_price(line.unit_price, invoice.currency),
                f"{line.amount:,}",
            ]
        )
    tax_label = t["tax_inclusive"] if invoice.terms.get("tax_inclusive") else t["tax"]
    rate = Decimal(invoice.terms.get("tax_rate", "0")) * 100
    if invoice.terms.get("taxes"):  # several taxes, per line: each with its base (billing.taxes)
        tax_rows = [[tax_label, "", "", f"{invoice.tax:,}"]] + [
            [f"  {x.name} {(x.rate * 100).normalize():f} % {t['on']} {x.base:,}", "", "", f"{x.amount:,}"]
            for x in tax_breakdown(invoice)
        ]
    else:
        tax_rows = [[f"{tax_label} {rate.normalize():f} %", "", "", f"{invoice.tax:,}"]]
    totals = [
        [t["subtotal"], "", "", f"{invoice.subtotal:,}"],
        *tax_rows,
        [t["total"], "", "", f"{invoice.total:,}"],
    ]
    if invoice.credits_applied:
        totals.append([t["credits"], "", "", f"-{invoice.credits_applied:,}"])
    if invoice.credit_notes:
        totals.append([t["credit_notes"], "", "", f"-{invoice.credit_notes:,}"])
    totals.append([t["due"], "", "", _money(invoice.amount_due, currency)])
    table = Table(rows + totals, colWidths=[85 * mm, 30 * mm, 30 * mm, 35 * mm], repeatRows=1)
    first_total = len(rows)
    table.setStyle(
        TableStyle(
            [
                ("FONTNAME", (0, 0), (-1, -1), font),
                ("FONTSIZE", (0, 0), (-1, -1), 9),
                ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8edf3")),
                ("ALIGN", (1, 0), (-1, -1), "RIGHT"),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LINEBELOW", (0, 0), (-1, 0), 0.6, colors.black),
                ("LINEABOVE", (0, first_total), (-1, first_total), 0.6, colors.black),
                ("LINEBELOW", (0, 1), (-1, first_total - 1), 0.25, colors.lightgrey),
                ("FONTSIZE", (0, -1), (-1, -1), 11),
            ]
        )
    )
    document.build(
        [
            Paragraph(heading, title),
            Spacer(1, 4 * mm),
            *[Paragraph(fact, body) for fact in facts],
            Spacer(1, 6 * mm),
            table,
            *_charge_groups(invoice, language, font),
            Spacer(1, 4 * mm),
            Paragraph(t["rounding"], body),
        ]
    )
    return buffer.getvalue()


def render_note_pdf(note: Note, language: str = "en") -> bytes:
    """A credit or debit note as PDF bytes: the parties of the invoice it corrects, that invoice, the
    line it corrects (if one), the reason, the amount, and what the invoice leaves owing after it."""
    if language not in TEXT:
        raise InvalidRequest("unsupported_language", f"Use one of {', '.join(TEXT)}, not {language!r}.")
    font = register_cjk_font()
    t = TEXT[language]
    body = ParagraphStyle("body", fontName=font, fontSize=10, leading=14)
    title = ParagraphStyle("title", fontName=font, fontSize=16, leading=20)
    invoice = note.invoice
    kind = t["credit_note"] if note.kind == Note.Kind.CREDIT else t["debit_note"]
    sign = "-" if note.kind == Note.Kind.CREDIT else ""
    facts = [
        *_parties(invoice, t, language)[:2],
        f"{t['date']}: {note.created_at:%Y-%m-%d}",
        f"{t['corrects']}: {invoice.number} "
        f"({invoice.period_start:%Y-%m-%d} – {invoice.period_end:%Y-%m-%d})",
    ]
    if note.line is not None:
        facts.append(
            f"{t['on_line']}: {_item(note.line, language)} ({_money(note.line.amount, invoice.currency)})"
        )
    facts += [
        f"{t['reason']}: {escape(note.reason)}",
        f"{t['note_amount']}: {sign}{_money(note.amount, invoice.currency)}",
        f"{t['due_after']}: {_money(invoice.amount_due, invoice.currency)}"
        if note.kind == Note.Kind.CREDIT
        else t["debit_charged"],
    ]
    buffer = BytesIO()
    document = _document(buffer, f"{kind} {note.number}")
    document.build(
        [Paragraph(f"{kind} {note.number}", title), Spacer(1, 4 * mm), *[Paragraph(f, body) for f in facts]]
    )
    return buffer.getvalue()
