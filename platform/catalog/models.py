from django.db import models

from accounts.validators import validate_slug_code


class ComputePackage(models.Model):
    """A business compute package ("review contracts"), sold instead of GPU hours."""

    code = models.CharField(max_length=64, unique=True, validators=[validate_slug_code])
    name = models.CharField(max_length=200)
    unit = models.CharField(max_length=64, default="request", help_text="What one unit of the package is.")
    description = models.TextField(blank=True)
    active = models.BooleanField(default=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code
