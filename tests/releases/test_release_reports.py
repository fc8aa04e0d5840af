"""A stage's gray-release report in the portal (HTML) and as a PDF, in English and Chinese; the API's
refusals; and another tenant's plans, which are never seen."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from accounts.access import PLATFORM
from releases.services import add_stage_note, promote_plan
from tests.api.conftest import member_client, staff_client, token_client
from tests.factories import TenantFactory, signing_agent
from tests.ledger.support import send
from tests.pdf_text import pdf_text
from tests.releases.gray_story import DAY_1, DAY_2, calls, review_contract, three_stages

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]


def test_a_stage_report_in_both_languages_html_and_pdf() -> None:
    contract = review_contract("report-review")
    agent = signing_agent(contract)
    plan = three_stages(contract)
    send(Client(), agent, calls(agent, contract, "ocr", DAY_1 + timedelta(hours=1), 30))
    send(Client(), agent, calls(agent, contract, "ocr", DAY_1 + timedelta(hours=2), 2, status="rejected"))
    promote_plan(plan=plan, principal=PLATFORM, now=DAY_2)
    stage = plan.stages.get(position=1)
    add_stage_note(stage=stage, text="OCR held up; dialect test set next.", author_id=None)
    url = f"/releases/{plan.code}/stages/1"

    english = member_client(contract.tenant).get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert english.status_code == 200
    text = english.content.decode()
    for expected in ("Gray-release report", "Resources used", "SLA attainment", "Acceptance", "Staff notes"):
        assert expected in text
    assert "OCR held up; dialect test set next." in text
    assert "Billing off: gray usage, not billed" in text
    chinese = member_client(contract.tenant).get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    for expected in ("灰度发布报告", "资源用量", "SLA 达成情况", "验收通过率", "运营备注", "计费关闭"):
        assert expected in chinese

    customer = member_client(contract.tenant)
    pdf_en = customer.get(f"{url}/pdf?lang=en")
    assert pdf_en.status_code == 200 and pdf_en["Content-Type"] == "application/pdf"
    en_text = pdf_text(pdf_en.content)
    assert "Gray-release report" in en_text and "Stage 1: Day 1: OCR only" in en_text
    assert "report-review-ocr" in en_text and "100.00 %" in en_text  # 30 calls, all within the SLA
    assert "OCR held up" in en_text
    zh_text = pdf_text(customer.get(f"{url}/pdf?lang=zh-Hans").content)
    assert "灰度发布报告" in zh_text and "资源用量" in zh_text and "运营备注" in zh_text

    listing = customer.get("/releases/").content.decode()
    assert plan.code in listing and "100 calls/hour" in listing


def test_another_tenants_plans_and_reports_are_not_found() -> None:
    plan = three_stages(review_contract("private-review"))
    outsider = TenantFactory.create()
    assert token_client(outsider).get(f"/v1/releases/{plan.code}").status_code == 404
    assert token_client(outsider).get("/v1/releases").json()["results"] == []
    assert token_client(outsider).post(f"/v1/releases/{plan.code}/promote").status_code == 404
    assert member_client(outsider).get(f"/releases/{plan.code}/stages/1").status_code == 404
    assert member_client(outsider).get(f"/releases/{plan.code}/stages/1/pdf").status_code == 404


def test_staff_make_and_note_plans_and_bad_input_is_a_4xx_with_a_code() -> None:
    contract = review_contract("api-review")
    body = {
        "code": "api-review-launch",
        "name": "Launch",
        "contract": contract.code,
        "stages": [
            {"name": "OCR", "capabilities": [{"capability": "api-review-ocr", "hourly_cap": 100}]},
            {"name": "All", "billing_on": True, "capabilities": [{"capability": "api-review-ocr"}]},
        ],
    }
    customer = token_client(contract.tenant)
    refused = customer.post("/v1/releases", body, content_type="application/json")
    assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")
    staff = staff_client()
    made = staff.post("/v1/releases", body, content_type="application/json")
    assert made.status_code == 201, made.content
    assert made.json()["current_stage"] == 1
    assert made.json()["stages"][0]["capabilities"] == [
        {"capability": "api-review-ocr", "model_id": "api-review/ocr", "hourly_cap": 100, "gated": True}
    ]
    again = staff.post("/v1/releases", {**body, "code": "api-review-2"}, content_type="application/json")
    assert (again.status_code, again.json()["code"]) == (409, "release_in_force")
    unknown = {**body, "code": "x", "stages": [{"name": "s", "capabilities": [{"capability": "nope"}]}]}
    answer = staff.post("/v1/releases", unknown, content_type="application/json")
    assert (answer.status_code, answer.json()["code"]) == (400, "capability_not_in_package")
    assert (
        staff.post("/v1/releases", {**body, "package": "nope"}, content_type="application/json").json()[
            "code"
        ]
        == "package_not_in_contract"
    )

    note = staff.post(
        "/v1/releases/api-review-launch/stages/1/notes", {"text": "ok"}, content_type="application/json"
    )
    assert note.status_code == 201 and note.json()["text"] == "ok"
    assert (
        customer.post(
            "/v1/releases/api-review-launch/stages/1/notes", {"text": "x"}, content_type="application/json"
        ).json()["code"]
        == "permission_denied"
    )
    assert (
        staff.post(
            "/v1/releases/api-review-launch/stages/9/notes", {"text": "x"}, content_type="application/json"
        ).status_code
        == 404
    )

    promoted = customer.post("/v1/releases/api-review-launch/promote")  # manual, a gate of 0 calls
    assert promoted.status_code == 200 and promoted.json()["current_stage"] == 2
    completed = customer.post("/v1/releases/api-review-launch/promote")
    assert completed.json()["status"] == "completed"
    after = customer.post("/v1/releases/api-review-launch/promote")
    assert (after.status_code, after.json()["code"]) == (409, "plan_completed")
