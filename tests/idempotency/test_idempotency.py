"""`Idempotency-Key` on POST: same key and body → same answer, replayed; another body → 422."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from idempotency.models import IdempotencyKey
from idempotency.services import purge_expired
from ledger.models import Checkpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_user("finance", is_staff=True))
    return client


def _publish(client: Client, key: str, body: str = "{}") -> Any:
    return client.post(
        "/v1/ledger/checkpoints", body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=key
    )


def test_same_key_and_body_replays_the_first_answer_without_doing_the_work_again(staff: Client) -> None:
    first = _publish(staff, "k-1")
    second = _publish(staff, "k-1")
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert second["Idempotent-Replayed"] == "true" and not first.has_header("Idempotent-Replayed")
    assert Checkpoint.objects.count() == 1
    _publish(staff, "k-2")
    assert Checkpoint.objects.count() == 2


def test_same_key_with_another_body_is_422(staff: Client) -> None:
    _publish(staff, "k-1", "{}")
    response = _publish(staff, "k-1", '{"other": 1}')
    assert response.status_code == 422 and response.json()["code"] == "idempotency_key_reused"


def test_keys_are_scoped_to_the_caller(staff: Client) -> None:
    _publish(staff, "shared")
    other = Client()
    other.force_login(get_user_model().objects.create_user("finance-2", is_staff=True))
    assert _publish(other, "shared").status_code == 201
    assert Checkpoint.objects.count() == 2


def test_an_unanswered_key_is_in_progress_until_its_lock_lapses(staff: Client) -> None:
    user = get_user_model().objects.get(username="finance")
    from idempotency.services import fingerprint

    row = IdempotencyKey.objects.create(
        scope=f"user:{user.pk}",
        key="busy",
        fingerprint=fingerprint("POST", "/v1/ledger/checkpoints", b"{}"),
        locked_until=timezone.now() + timedelta(seconds=30),
    )
    busy = _publish(staff, "busy")
    assert busy.status_code == 409 and busy.json()["code"] == "idempotency_in_progress"
    IdempotencyKey.objects.filter(pk=row.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert _publish(staff, "busy").status_code == 201


def test_errors_are_replayed_but_a_bad_key_is_refused(staff: Client) -> None:
    customer = Client()
    customer.force_login(get_user_model().objects.create_user("nobody"))
    first = customer.post(
        "/v1/ledger/checkpoints", "{}", content_type="application/json", HTTP_IDEMPOTENCY_KEY="e"
    )
    again = customer.post(
        "/v1/ledger/checkpoints", "{}", content_type="application/json", HTTP_IDEMPOTENCY_KEY="e"
    )
    assert first.status_code == again.status_code == 403 and again["Idempotent-Replayed"] == "true"
    too_long = _publish(staff, "x" * 256)
    assert too_long.status_code == 400 and too_long.json()["code"] == "invalid_idempotency_key"


def test_expired_keys_are_purged_and_reusable(staff: Client) -> None:
    _publish(staff, "old")
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    assert _publish(staff, "old").status_code == 201 and Checkpoint.objects.count() == 2
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    assert purge_expired() == 1 and not IdempotencyKey.objects.exists()
