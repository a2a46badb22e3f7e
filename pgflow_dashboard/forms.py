"""The run page's forms for free input (``views.py``): a signal (a name and a JSON payload)
and a re-run's new input; and the JSON-object field the schedule form reads an input with.
The admins' model forms (``ScheduleForm``, ``AlertRuleForm``) live beside their admins in
``pgflow_dashboard/admin/``."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from pgflow.core import jsonvalue
from pgflow.signals import NAME_LIMIT


class SignalForm(forms.Form):
    name = forms.CharField(max_length=NAME_LIMIT, strip=True, help_text="the name a step waits for (wait_for=…)")
    payload = forms.CharField(
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "spellcheck": "false"}),
        help_text='JSON, e.g. {"amount": 10}; empty sends null',
    )

    send_anyway = forms.BooleanField(
        required=False, label="Send anyway", help_text="send a name no step of this workflow waits for"
    )

    def __init__(self, *args: Any, waited_for: tuple[str, ...] | None = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The names the class's steps wait for: offered as suggestions, and any other name
        # is refused unless "send anyway" is ticked (it would wait, never consumed). None:
        # not checked (an ended run: the engine's own refusal says why).
        self.check_name = waited_for is not None
        self.waited_for = waited_for or ()
        if waited_for:
            self.fields["name"].widget.attrs["list"] = "pgflow-signal-names"
            self.fields["name"].help_text = f"this workflow's steps wait for: {', '.join(waited_for)}"
            if len(waited_for) == 1 and not self.is_bound:
                self.initial.setdefault("name", waited_for[0])

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        why = jsonvalue.text_problem(name)
        if why:
            raise forms.ValidationError(f"the signal name cannot be stored: {why}")
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        name = cleaned.get("name")
        if self.check_name and name and name not in self.waited_for and not cleaned.get("send_anyway"):
            waits = (
                f"its steps wait for {', '.join(map(repr, self.waited_for))}"
                if self.waited_for
                else ("none of its steps waits for a signal")
            )
            self.add_error(
                "name",
                f"no step of this workflow waits for {name!r} ({waits}): it would never be consumed; "
                "tick “Send anyway” to send it all the same",
            )
        return cleaned

    def clean_payload(self) -> Any:
        text = self.cleaned_data["payload"]
        if not text:
            return None
        try:
            # NaN and Infinity are not JSON: PostgreSQL's jsonb refuses them.
            value = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise forms.ValidationError(f"the payload is not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("the payload is nested too deeply to read as JSON") from None
        why = jsonvalue.problem(value)  # a lone surrogate or NUL escape parses but cannot be stored
        if why:
            raise forms.ValidationError(f"the payload cannot be stored: {why}")
        return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


class RerunForm(forms.Form):
    """The re-run confirmation page: the new run's input, as JSON (a JSON object)."""

    input = forms.CharField(
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 80, "spellcheck": "false"}),
        help_text='a JSON object, e.g. {"amount": 10}; empty keeps {}',
    )

    def clean_input(self) -> Any:
        text = self.cleaned_data["input"]
        if not text:
            return {}
        try:
            value = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise forms.ValidationError(f"the input is not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("the input is nested too deeply to read as JSON") from None
        if not isinstance(value, dict):
            raise forms.ValidationError(f"the input must be a JSON object ({{...}}), got a {type(value).__name__}")
        why = jsonvalue.problem(value)
        if why:
            raise forms.ValidationError(f"the input cannot be stored: {why}")
        return value


class JSONObjectInput(forms.JSONField):
    """The JSON text of an input: NaN and Infinity refused, JSON nested past Python's limit
    a field error (Django's JSONField answers those with a 500), and a refused value shown
    again exactly as it was typed."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or isinstance(value, dict | list):
            return value
        if value in self.empty_values:
            return None
        try:
            return json.loads(value, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise forms.ValidationError(f"the input is not valid JSON: {exc}") from None
        except RecursionError:
            raise forms.ValidationError("the input is nested too deeply to read as JSON") from None

    def bound_data(self, data: Any, initial: Any) -> Any:
        # What was typed, not its parsed value: a refused value (a lone surrogate) could not
        # even be shown again once parsed.
        return initial if self.disabled else forms.fields.InvalidJSONInput(data)
