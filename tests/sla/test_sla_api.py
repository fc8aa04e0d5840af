"""/v1/sla/… and the HTML report page: tenant-scoped reads of stored reports, JSON, HTML and PDF."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from accounts.models import Membership
from common import cjk_font
from sla.models import ServiceCredit, SlaReport
from sla.services import compute_report
from tests.factories import ContractFactory, signing_agent
from tests.pdf_text import embedded_fonts, pdf_text
from tests.sla.helpers import make_policy, ns, records, store

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]
AFTER_NOV = datetime(2026, 12, 2, tzinfo=UTC)


def report_for_new_tenant(failed: int = 2) -> SlaReport:
    contract = ContractFactory.create()
    make_policy(contract, latency=[("l3", "150", "99")])
    agent = signing_agent(contract, agent_id=f"agent-{contract.code}")
    store(
        records(agent, contract, 1000 - failed, ns(2026, 11, 10))
        + records(agent, contract, failed, ns(2026, 11, 12), status="error")
    )
    return compute_report(contract, "2026-11", now=AFTER_NOV)


def member_of(report: SlaReport, django_user_model: Any, name: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw")
    Membership.objects.create(user=user, tenant=report.contract.tenant)
    client = Client()
    client.force_login(user)
    return client


def test_a_tenant_reads_its_report_as_json(django_user_model: Any) -> None:
    report = report_for_new_tenant()
    client = member_of(report, django_user_model, "alice")

    body = client.get(f"/v1/sla/reports/{report.pk}").json()

    assert (body["contract"], body["month"], body["status"], body["valid_count"]) == (
        report.contract.code,
        "2026-11",
        "final",
        1000,
    )
    assert Decimal(body["credit_percent"]) == 10
    assert [(o["name"], o["measured_percent"], o["target_percent"]) for o in body["objectives"]] == [
        ("availability", "99.8000", "99.9000"),
        ("latency-l3", "100.0000", "99.0000"),
    ]
    assert body["percentiles_ms"]["l3"]["0.99"] == "90"
    assert len(body["daily"]) == 30 and body["time_zone"] == "Asia/Shanghai"
    listed = client.get("/v1/sla/reports", {"month": "2026-11"}).json()["results"]
    assert [r["id"] for r in listed] == [report.pk]


def test_another_tenants_report_and_credits_are_refused(django_user_model: Any) -> None:
    mine, theirs = report_for_new_tenant(), report_for_new_tenant()
    ServiceCredit.objects.create(
        contract=theirs.contract,
        report=theirs,
        month="2026-11",
        credit_percent=10,
        fee_basis=Decimal("100"),
        amount=Decimal("10"),
        currency="CNY",
        description="theirs",
    )
    client = member_of(mine, django_user_model, "alice")

    for url in (
        f"/v1/sla/reports/{theirs.pk}",
        f"/v1/sla/reports/{theirs.pk}/pdf",
        f"/sla/reports/{theirs.pk}",
    ):
        response = client.get(url)
        assert response.status_code == 404, url
    assert client.get("/v1/sla/reports").json()["results"] == [
        {
            "id": mine.pk,
            "contract": mine.contract.code,
            "tenant": mine.contract.tenant.code,
            "month": "2026-11",
            "status": "final",
            "valid_count": 1000,
            "credit_percent": "10.0000",
            "computed_at": "2026-12-02T00:00:00Z",
        }
    ]
    assert client.get("/v1/sla/reports", {"contract": theirs.contract.code}).json()["results"] == []
    assert client.get("/v1/sla/credits").json()["results"] == []


def test_staff_read_every_tenant_and_anonymous_callers_none(staff: Any) -> None:
    first, second = report_for_new_tenant(), report_for_new_tenant()
    anonymous = Client()
    assert anonymous.get(f"/v1/sla/reports/{first.pk}").status_code in (401, 403)
    assert anonymous.get(f"/sla/reports/{first.pk}").status_code == 302  # to the login page
    client = Client()
    client.force_login(staff)
    assert {r["id"] for r in client.get("/v1/sla/reports").json()["results"]} == {first.pk, second.pk}


def test_bad_filters_and_languages_get_the_error_shape(staff: Any) -> None:
    report = report_for_new_tenant()
    client = Client()
    client.force_login(staff)
    response = client.get("/v1/sla/reports", {"month": "2026-13"})
    assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    response = client.get(f"/v1/sla/reports/{report.pk}/pdf", {"lang": "fr"})
    assert (response.status_code, response.json()["code"]) == (400, "unsupported_language")
    response = client.get("/v1/sla/alerts", {"open": "maybe"})
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert list(response.json()["details"]) == ["open"]
    response = client.get("/v1/sla/reports/99999999999999999999")  # beyond bigint: none such, not a 500
    assert (response.status_code, response.json()["code"]) == (404, "not_found")


def test_the_html_page_shows_objectives_credit_and_exclusions(django_user_model: Any) -> None:
    report = report_for_new_tenant(failed=11)
    client = member_of(report, django_user_model, "bob")
    page = client.get(f"/sla/reports/{report.pk}").content.decode()
    assert f"SLA report: {report.contract.code}, 2026-11" in page
    assert "98.9000" in page and "<strong>25 %</strong>" in page
    assert page.count('class="bar"') == 60  # 30 days × 2 objectives


def test_english_pdf(staff: Any) -> None:
    report = report_for_new_tenant(failed=11)
    client = Client()
    client.force_login(staff)
    response = client.get(f"/v1/sla/reports/{report.pk}/pdf", {"lang": "en"})
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert response.content.startswith(b"%PDF")
    text = pdf_text(response.content)
    assert f"SLA report: {report.contract.code}" in text
    assert "98.9000" in text and "Service credit: 25 % of the month's fee" in text


def test_chinese_pdf_embeds_its_font(staff: Any) -> None:
    report = report_for_new_tenant(failed=11)
    client = Client()
    client.force_login(staff)
    response = client.get(f"/v1/sla/reports/{report.pk}/pdf", {"lang": "zh-Hans"})
    assert response.status_code == 200
    assert embedded_fonts(response.content) == {"WenQuanYiMicroHei"}  # the TrueType subset is inside
    text = pdf_text(response.content)
    assert "服务等级协议（SLA）报告" in text and "服务赔付：当月费用的 25 %" in text


@pytest.mark.parametrize("language", ["en", "zh-Hans"])
def test_a_broken_font_install_answers_503_pdf_font_missing(
    staff: Any, monkeypatch: pytest.MonkeyPatch, language: str
) -> None:
    report = report_for_new_tenant()
    monkeypatch.setattr(cjk_font, "FONT_PACKAGE", "no_such_font_package")  # the package gone
    monkeypatch.setattr(cjk_font, "CJK_FONT_NAME", "TreemeterCJKGone")  # and not registered yet
    client = Client()
    client.force_login(staff)
    response = client.get(f"/v1/sla/reports/{report.pk}/pdf", {"lang": language})
    assert (response.status_code, response.json()["code"]) == (503, "pdf_font_missing")


def test_staff_declare_exclusions_once_and_tenants_read_only_their_own(
    staff: Any, django_user_model: Any
) -> None:
    mine, theirs = report_for_new_tenant(), report_for_new_tenant()
    client = Client()
    client.force_login(staff)
    body = {
        "contract": mine.contract.code,
        "kind": "customer_dependency",
        "scope": "failed",
        "starts_at": "2026-11-12T00:00:00Z",
        "ends_at": "2026-11-12T01:00:00Z",
        "reason": "Customer HIS answered 503",
    }
    first = client.post("/v1/sla/exclusions", body, content_type="application/json")
    again = client.post("/v1/sla/exclusions", body, content_type="application/json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json() and first.json()["declared_by"] == "ops"
    backwards = {**body, "ends_at": "2026-11-11T00:00:00Z"}
    response = client.post("/v1/sla/exclusions", backwards, content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    client.post(
        "/v1/sla/exclusions", {**body, "contract": theirs.contract.code}, content_type="application/json"
    )

    tenant = member_of(mine, django_user_model, "alice")
    assert [x["contract"] for x in tenant.get("/v1/sla/exclusions").json()["results"]] == [mine.contract.code]
    forbidden = tenant.post("/v1/sla/exclusions", body, content_type="application/json")
    assert forbidden.status_code == 403 and forbidden.json()["code"] == "permission_denied"
    # The month's report was already final: a late declaration does not rewrite it.
    assert compute_report(mine.contract, "2026-11", now=AFTER_NOV).excluded_count == 0


def test_the_html_page_lists_the_exclusions_it_applied(staff: Any) -> None:
    from sla.services import declare_exclusion

    contract = ContractFactory.create()
    make_policy(contract)
    agent = signing_agent(contract)
    store(
        records(agent, contract, 10, ns(2026, 11, 12, 2), status="error")
        + records(agent, contract, 90, ns(2026, 11, 13))
    )
    declare_exclusion(
        contract,
        kind="maintenance",
        starts_at=datetime(2026, 11, 12, 2, tzinfo=UTC),
        ends_at=datetime(2026, 11, 12, 3, tzinfo=UTC),
        reason="Router upgrade <announced>",
        declared_by=staff,
    )
    report = compute_report(contract, "2026-11", now=AFTER_NOV)
    client = Client()
    client.force_login(staff)
    page = client.get(f"/sla/reports/{report.pk}").content.decode()
    assert "<tr><th>Excluded</th><td>10</td></tr>" in page
    assert "Router upgrade &lt;announced&gt;, declared by ops" in page
    assert "<strong>0 %</strong>" in page  # 90 of 90 valid served
