"""Every model's plural reads as English in the admin ("Credit entries", not "Credit entrys")."""

from __future__ import annotations

import re

from django.apps import apps


def test_no_model_plural_is_a_naive_s_after_y() -> None:
    wrong = [
        f"{m._meta.label}: {m._meta.verbose_name_plural}"
        for m in apps.get_models()
        if re.search(r"[^aeiou]ys$", str(m._meta.verbose_name_plural))
    ]
    assert wrong == []
