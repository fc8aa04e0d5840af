"""Portal forms. Choices come from the principal's own objects, so another tenant's are never valid."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from accounts.access import Principal
from contracts.models import Contract

from . import selectors


class ApiKeyForm(forms.Form):
    # The refusal never repeats the value sent: it may be another tenant's contract code.
    contract = forms.ChoiceField(
        label=_("Contract"), error_messages={"invalid_choice": _("Choose one of your active contracts.")}
    )
    name = forms.CharField(label=_("Name"), max_length=200, required=False)
    sla_class = forms.SlugField(label=_("SLA class"), max_length=64, initial="standard")
    quota_tokens = forms.IntegerField(
        label=_("Monthly token quota"), min_value=0, required=False, help_text=_("Empty: no quota.")
    )

    def __init__(self, principal: Principal, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        active = selectors.contracts(principal).filter(status=Contract.Status.ACTIVE)
        contract = self.fields["contract"]
        assert isinstance(contract, forms.ChoiceField)
        contract.choices = [(c.code, f"{c.code} · {c.package.name}") for c in active]


class WebhookEndpointForm(forms.Form):
    url = forms.URLField(label=_("URL"), max_length=500, assume_scheme="https")
    event_types = forms.CharField(
        label=_("Event types"),
        required=False,
        help_text=_("Comma-separated patterns, e.g. invoice.*, dispute.updated; empty: every event."),
    )

    def clean_event_types(self) -> list[str]:
        return [p.strip() for p in self.cleaned_data["event_types"].split(",") if p.strip()]
