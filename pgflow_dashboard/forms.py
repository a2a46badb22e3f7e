"""The run page's one form with free input: send a signal (a name and a JSON payload)."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from pgflow.signals import NAME_LIMIT


class SignalForm(forms.Form):
    name = forms.CharField(max_length=NAME_LIMIT, strip=True, help_text="the name a step waits for (wait_for=…)")
    payload = forms.CharField(
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
        help_text='JSON, e.g. {"amount": 10}; empty sends null',
    )

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"]
        if not text:
            return None
        try:
            # NaN and Infinity are not JSON: PostgreSQL's jsonb refuses them.
            return json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise forms.ValidationError(f"the payload is not valid JSON: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")
