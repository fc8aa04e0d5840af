import re

from django.core.exceptions import ValidationError

# The same shape treemeter_records accepts for tenant, contract, package and agent codes.
SLUG_CODE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def validate_slug_code(value: str) -> None:
    if not SLUG_CODE.match(value):
        raise ValidationError(
            "%(value)s is not a valid code: use 1-64 of a-z, 0-9, '.', '_', '-', "
            "starting with a letter or digit.",
            params={"value": value},
        )
