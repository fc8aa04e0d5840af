"""The SLA reaches billing through billing's port: the running app registers sla's billing pauses and
service credits (sla.billing_sources), and there is one SLA policy lookup (sla.terms)."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps import apps
from django.conf import settings

from billing.adjustments import registered_sources
from sla.billing_sources import SlaBillingPauses, SlaServiceCredits
from sla.terms import policies_for, policy_for
from tests.factories import ContractFactory
from tests.sla.helpers import make_policy


def test_the_running_app_registers_the_sla_sources_with_billing() -> None:
    assert "sla" in settings.INSTALLED_APPS
    sources = registered_sources()
    assert isinstance(sources.pauses, SlaBillingPauses)
    assert isinstance(sources.credits, SlaServiceCredits)


def test_getting_ready_again_registers_them_once_more_not_twice() -> None:
    apps.get_app_config("sla").ready()
    sources = registered_sources()
    assert isinstance(sources.pauses, SlaBillingPauses)
    assert isinstance(sources.credits, SlaServiceCredits)


@pytest.mark.django_db
def test_many_contracts_policies_in_one_query_are_each_ones_policy(django_assert_num_queries: Any) -> None:
    by_package, own, none = (ContractFactory.create() for _ in range(3))
    package_policy = make_policy(package=by_package.package)
    make_policy(package=own.package)
    own_policy = make_policy(own, availability="99")

    with django_assert_num_queries(1):
        found = policies_for([by_package, own, none])

    assert found == {by_package.pk: package_policy, own.pk: own_policy}
    assert [policy_for(c) for c in (by_package, own, none)] == [package_policy, own_policy, None]
