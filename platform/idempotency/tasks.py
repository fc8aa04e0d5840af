from __future__ import annotations

from celery import shared_task

from .services import purge_expired


@shared_task(name="idempotency.purge_expired")
def purge_expired_keys() -> int:
    return purge_expired()
