"""The OpenAPI document describes these endpoints with their real serializers, filters and pagination."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def schema() -> dict[str, Any]:
    response = Client().get("/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def ref(operation: dict[str, Any], status: str) -> str:
    return operation["responses"][status]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]


def test_the_resources_are_documented() -> None:
    doc = schema()
    paths, components = doc["paths"], doc["components"]["schemas"]
    expected = {
        ("/v1/packages", "get", "200"): "PaginatedPackageList",
        ("/v1/packages/{code}", "get", "200"): "Package",
        ("/v1/purchases", "post", "201"): "Purchase",
        ("/v1/contracts", "get", "200"): "PaginatedContractList",
        ("/v1/contracts/{code}", "get", "200"): "Contract",
        ("/v1/tokens", "post", "201"): "IssuedApiToken",
        ("/v1/keys", "get", "200"): "PaginatedApiKeyList",
        ("/v1/keys", "post", "201"): "IssuedApiKey",
        ("/v1/invoices", "get", "200"): "PaginatedInvoiceSummaryList",
        ("/v1/credit-notes/{id}", "get", "200"): "CreditNote",
        ("/v1/outcomes", "get", "200"): "PaginatedOutcomeReadList",
        ("/v1/webhooks/endpoints", "post", "201"): "CreatedEndpoint",
        ("/v1/webhooks/endpoints/{id}/deliveries", "get", "200"): "PaginatedDeliveryList",
        ("/v1/webhooks/deliveries/{id}/replay", "post", "202"): "Delivery",
    }
    assert {key: ref(paths[key[0]][key[1]], key[2]) for key in expected} == expected
    assert set(components["Purchase"]["properties"]) == {"contract", "checkout_url"}
    assert set(components["Quota"]["properties"]) == {
        "dimension",
        "charge_model",
        "unit_price",
        "included",
        "used",
        "left",
    }
    invoice_filters = {p["name"] for p in paths["/v1/invoices"]["get"]["parameters"]}
    assert invoice_filters == {"cursor", "limit", "status", "period", "contract"}
    assert "apiToken" in doc["components"]["securitySchemes"]
