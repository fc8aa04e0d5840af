"""The package factory in the portal: a template fills the form, an upload builds the package and shows
its quote and manifests, a bad model is refused on the page with the factory's own message."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from catalog.models import ComputePackage, HostCostProfile
from package_factory.models import PackageBuild
from package_factory.templates import template
from tests.factories import TenantFactory
from tests.frontend.support import member
from tests.package_factory.onnx_models import linear_model

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("clickhouse")]

FORM = {
    "package_code": "acme-faults",
    "package_name": "ACME fault risk",
    "unit": "risk_event",
    "capability_code": "acme-fault-scorer",
    "capability_name": "Fault scorer",
    "inputs": '[{"name": "x", "dtype": "float32", "shape": [null, 4]}]',
    "outputs": '[{"name": "y", "dtype": "float32", "shape": [null, 2]}]',
    "acceptance_rule": "outcome_false_alarm_rate <= 0.05",
    "timeout_ms": "500",
    "p99_ms": "200",
    "availability_percent": "99.9",
    "currency": "CNY",
    "per_event": "8.00",
    "included_events": "0",
    "events_per_month": "2000",
    "margin_factor": "1.3",
    "base_fee": "",
    "host_class": "cpu-2",
    "template": "equipment-fault-prediction",
}


@pytest.fixture(autouse=True)
def cost_profile() -> None:
    HostCostProfile.objects.create(
        host_class="cpu-2",
        currency="CNY",
        depreciation_per_hour=Decimal(2),
        power_per_hour=Decimal("0.5"),
        operations_per_hour=Decimal(1),
    )


def test_a_template_fills_the_form_in_the_readers_language() -> None:
    tenant = TenantFactory.create()
    url = reverse("portal-factory") + "?template=equipment-fault-prediction"
    english = member(tenant).get(url).content.decode()
    chinese = member(tenant, language="zh-hans").get(url).content.decode()
    chosen = template("equipment-fault-prediction")
    assert 'value="risk_event"' in english and 'value="8.00"' in english
    assert chosen.description["en"] in english and chosen.description["zh-hans"] in chinese
    assert "设备故障预测" in chinese  # the template's Chinese name in the chooser


def test_an_upload_builds_the_package_and_shows_its_quote_and_manifests() -> None:
    tenant = TenantFactory.create()
    client = member(tenant)
    answer = client.post(
        reverse("portal-factory"), FORM | {"model": SimpleUploadedFile("m.onnx", linear_model())}
    )
    assert (answer.status_code, answer["Location"]) == (
        302,
        reverse("portal-factory-build", args=["acme-faults"]),
    )

    build = PackageBuild.objects.get(package__code="acme-faults")
    assert (build.tenant, build.template, build.capability.acceptance_rule) == (
        tenant,
        "equipment-fault-prediction",
        "outcome_false_alarm_rate <= 0.05",
    )
    shown = client.get(answer["Location"]).content.decode()
    assert build.quote["formula"] in shown
    assert f"{build.quote['base_fee']} CNY" in shown and "(the proposal)" in shown
    assert f"SHA-256 {build.capability.artifact_id}" in shown and "kind: Deployment" in shown
    listed = client.get(reverse("portal-factory")).content.decode()
    assert reverse("portal-factory-build", args=["acme-faults"]) in listed
    assert 'data-testid="package-acme-faults"' in client.get(reverse("portal-packages")).content.decode()


def test_a_bad_upload_is_refused_on_the_page_and_builds_nothing() -> None:
    client = member(TenantFactory.create())
    not_onnx = client.post(
        reverse("portal-factory"), FORM | {"model": SimpleUploadedFile("m.onnx", b"\x00\x01 no")}
    )
    assert not_onnx.status_code == 400
    assert "The file is not a valid ONNX model" in not_onnx.content.decode()
    wrong_shape = FORM | {"inputs": '[{"name": "x", "dtype": "float32", "shape": [null, 5]}]'}
    refused = client.post(
        reverse("portal-factory"), wrong_shape | {"model": SimpleUploadedFile("m.onnx", linear_model())}
    )
    assert refused.status_code == 400
    text = refused.content.decode()
    assert "declared with shape [free, 5]; the model&#x27;s is [free, 4]" in text
    assert 'value="acme-faults"' in text  # the form keeps what was typed
    missing = client.post(reverse("portal-factory"), FORM)
    assert missing.status_code == 400 and "Choose the ONNX model file to upload." in missing.content.decode()
    assert not PackageBuild.objects.exists() and not ComputePackage.objects.exists()
