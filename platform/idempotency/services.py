"""`Idempotency-Key` on POST: same key and body → the first answer again; a different body → 422.

Keys are scoped to the caller and kept for `IDEMPOTENCY_KEY_TTL_HOURS`. A claimed key whose request
has not answered yet is `in progress` (409) until its lock lapses, so a crashed request does not pin it.
Answers of 5xx are not kept: the caller may retry with the same key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import IdempotencyKey

LOCK = timedelta(seconds=60)


@dataclass(frozen=True)
class Claim:
    outcome: str  # "new" | "replay" | "mismatch" | "in_progress"
    row: IdempotencyKey


def fingerprint(method: str, path: str, body: bytes) -> str:
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def claim_key(scope: str, key: str, print_: str) -> Claim:
    now = timezone.now()
    expired_before = now - timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS)
    with transaction.atomic():
        row = IdempotencyKey.objects.select_for_update().filter(scope=scope, key=key).first()
        if row is not None and row.created_at < expired_before:
            row.delete()
            row = None
        if row is None:
            try:
                with transaction.atomic():
                    row = IdempotencyKey.objects.create(
                        scope=scope, key=key, fingerprint=print_, locked_until=now + LOCK
                    )
            except IntegrityError:  # a concurrent first use won the race
                return Claim("in_progress", IdempotencyKey.objects.get(scope=scope, key=key))
            return Claim("new", row)
        if row.fingerprint != print_:
            return Claim("mismatch", row)
        if row.status_code is not None:
            return Claim("replay", row)
        if row.locked_until > now:
            return Claim("in_progress", row)
        row.locked_until = now + LOCK
        row.save(update_fields=["locked_until"])
        return Claim("new", row)


def record_answer(row: IdempotencyKey, status_code: int, content_type: str, body: bytes) -> None:
    if status_code >= 500:
        row.delete()
        return
    row.status_code, row.content_type, row.body = status_code, content_type, body
    row.save(update_fields=["status_code", "content_type", "body"])


def release(row: IdempotencyKey) -> None:
    """Forget an unanswered claim (the request failed or its answer cannot be stored)."""
    IdempotencyKey.objects.filter(pk=row.pk, status_code__isnull=True).delete()


def purge_expired() -> int:
    cutoff = timezone.now() - timedelta(hours=settings.IDEMPOTENCY_KEY_TTL_HOURS)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
