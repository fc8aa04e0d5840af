from __future__ import annotations

from django.db import models


class IdempotencyKey(models.Model):
    """A POST seen with an `Idempotency-Key` header, and the answer it got (once it has one)."""

    scope = models.CharField(max_length=100, help_text="Whose key: a user, a credential's hash, or anon.")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of method, path and body.")
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    body = models.BinaryField(default=b"")
    locked_until = models.DateTimeField(help_text="While unanswered, a retry waits until then.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="idempotency_one_key_per_scope")]
        indexes = [models.Index(fields=["created_at"])]

    def __str__(self) -> str:
        return f"{self.scope} {self.key} → {self.status_code}"
