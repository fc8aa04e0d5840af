from django.db import models

from .validators import validate_slug_code


class Tenant(models.Model):
    """A customer organisation. `code` is what agents put in each record's `tenant` field."""

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code
