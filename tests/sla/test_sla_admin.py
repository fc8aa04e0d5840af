"""The SLA models in the admin: lists render, and an exclusion records who declared it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from sla.models import Exclusion
from tests.factories import ContractFactory
from tests.sla.helpers import make_policy

pytestmark = pytest.mark.django_db


def test_admin_lists_render_and_declaring_an_exclusion_names_the_user(django_user_model: Any) -> None:
    admin = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(admin)
    contract = ContractFactory.create()
    make_policy(contract)
    for model in (
        "slapolicy",
        "objective",
        "exclusion",
        "slareport",
        "servicecredit",
        "slaalert",
        "customerdependency",
        "exclusionappeal",
    ):
        assert client.get(f"/admin/sla/{model}/").status_code == 200, model

    response = client.post(
        "/admin/sla/exclusion/add/",
        {
            "contract": contract.pk,
            "kind": "maintenance",
            "scope": "all",
            "starts_at_0": "2026-11-12",
            "starts_at_1": "02:00:00",
            "ends_at_0": "2026-11-12",
            "ends_at_1": "03:00:00",
            "reason": "Router upgrade, announced 7 days ahead",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    exclusion = Exclusion.objects.get()
    assert (exclusion.declared_by, exclusion.reason) == (admin, "Router upgrade, announced 7 days ahead")
