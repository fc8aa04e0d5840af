"""Fixtures for SLA tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ops", password="pw", is_staff=True)
