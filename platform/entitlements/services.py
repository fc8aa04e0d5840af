"""Writes for customer API keys."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from accounts.access import PLATFORM, Principal, scoped
from accounts.validators import validate_slug_code
from common.errors import ApiError
from contracts.models import Contract
from treemeter_records.protocol import API_KEY_PREFIX, api_key_hash

from .models import ApiKey


class EntitlementError(ApiError, ValueError):
    http_status = 400


class UnknownApiKey(EntitlementError):
    http_status = 404


class UnknownContract(EntitlementError):
    http_status = 404


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    secret: str  # the only time the key exists in clear


@transaction.atomic
def issue_api_key(
    *,
    contract_code: str,
    sla_class: str = "standard",
    quota_tokens: int | None = None,
    name: str = "",
    package_code: str = "",
) -> IssuedKey:
    """A new key bound to a contract (hence its tenant), the package of the contract its requests are
    made under (empty: the contract's own), an SLA class and a monthly quota."""
    contract = Contract.objects.select_related("tenant").filter(code=contract_code).first()
    if contract is None:
        raise EntitlementError("unknown_contract", f"Unknown contract {contract_code!r}.")
    if contract.status != Contract.Status.ACTIVE:
        raise EntitlementError("contract_not_active", f"Contract {contract_code} is {contract.status}.")
    try:
        validate_slug_code(sla_class)
    except Exception:
        raise EntitlementError("invalid_sla_class", f"{sla_class!r} is not a valid SLA class code.") from None
    if quota_tokens is not None and quota_tokens < 0:
        raise EntitlementError("invalid_quota", "quota_tokens must not be negative.")
    package = None
    if package_code:
        package = next((p for p in contract.held_packages() if p.code == package_code), None)
        if package is None:
            raise EntitlementError(
                "package_not_in_contract",
                f"Contract {contract_code} holds no package {package_code!r}.",
                {"package": package_code, "held": [p.code for p in contract.held_packages()]},
            )
    secret = API_KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        prefix=secret[:12],
        key_hash=api_key_hash(secret),
        name=name,
        tenant=contract.tenant,
        contract=contract,
        package=package,
        sla_class=sla_class,
        quota_tokens=quota_tokens,
    )
    return IssuedKey(api_key, secret)


def issue_tenant_api_key(
    principal: Principal,
    *,
    contract_code: str,
    sla_class: str = "standard",
    quota_tokens: int | None = None,
    name: str = "",
    package_code: str = "",
) -> IssuedKey:
    """A key for one of the principal's own contracts (staff: any); another tenant's contract is 404."""
    if not scoped(Contract.objects.filter(code=contract_code), principal).exists():
        raise UnknownContract(
            "contract_not_found", f"No contract {contract_code!r}.", {"contract": contract_code}
        )
    return issue_api_key(
        contract_code=contract_code,
        sla_class=sla_class,
        quota_tokens=quota_tokens,
        name=name,
        package_code=package_code,
    )


def revoke_api_key(prefix: str, principal: Principal = PLATFORM) -> ApiKey:
    """Revoke a key the principal sees (another tenant's is unknown): agents refuse it (403) from their next
    snapshot. Revoking twice keeps the first time."""
    api_key = scoped(ApiKey.objects.filter(prefix=prefix), principal).first()
    if api_key is None:
        raise UnknownApiKey("unknown_api_key", f"No API key starts with {prefix!r}.")
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key
