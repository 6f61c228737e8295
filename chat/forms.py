"""Forms of the chat app; the websocket and the HTTP API parse with them too."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator
from django.utils.translation import gettext, gettext_lazy

from knowledge.models import KnowledgeBase

from .pipeline import ChatOptions, ChatRequest
from .routing_kb import InvalidWorkerName, parse_worker_name
from .workers import AGENT_TYPES

AUTO = "auto"
UNKNOWN_KB = "unknown_kb"


class AskForm(forms.Form):
    """A question: message, optional session, and a KB slug or "auto"."""

    message = forms.CharField(strip=True, error_messages={"required": gettext_lazy("The message is empty.")})
    session_id = forms.RegexField(
        regex=r"^[A-Za-z0-9_.:-]{1,64}$",
        required=False,
        error_messages={"invalid": "session_id: 1-64 letters, digits and _ . : -"},
    )
    kb = forms.CharField(required=False, max_length=64)
    agent_type = forms.ChoiceField(choices=[(name, name) for name in AGENT_TYPES], required=False)
    # A worker name, `{kb}:{agent_type}:{mode}` (or `{kb}:{agent_type}`, or just the type): the
    # agent, and the KB when it names one.
    agent = forms.CharField(required=False, max_length=200)
    # A choice picked from the Clarifier's question: the answer goes on, it is not asked again.
    clarified = forms.BooleanField(required=False)

    def __init__(self, data=None, *, user, **kwargs) -> None:
        super().__init__(data, **kwargs)
        self.user = user
        limit = settings.CHAT_MAX_MESSAGE_CHARS
        self.fields["message"].max_length = limit
        self.fields["message"].validators.append(MaxLengthValidator(limit))
        self.fields["message"].error_messages["max_length"] = (
            gettext("The message is longer than %(limit)s characters.") % {"limit": limit}
        )

    def clean_kb(self) -> str | None:
        return self._readable_kb(self.cleaned_data["kb"])

    def _readable_kb(self, slug: str) -> str | None:
        """The slug of a KB the user may read; None for "auto" or none."""
        slug = slug.strip()
        if slug in ("", AUTO):
            return None
        # One message for a KB that does not exist and one the user may not read.
        if not KnowledgeBase.objects.readable_by(self.user).filter(slug=slug).exists():
            raise forms.ValidationError(gettext("No such knowledge base."), code=UNKNOWN_KB)
        return slug

    def clean_agent_type(self) -> str:
        return self.cleaned_data["agent_type"] or AUTO

    def clean(self) -> dict:
        data = super().clean()
        agent = (data.get("agent") or "").strip()
        if not agent or self.errors:
            return data
        try:
            spec = parse_worker_name(agent)
        except InvalidWorkerName as error:
            raise forms.ValidationError(str(error)) from error
        if spec.agent_type not in AGENT_TYPES:
            raise forms.ValidationError(gettext("No such agent type: %(name)s.") % {"name": spec.agent_type})
        if data["agent_type"] not in (AUTO, spec.agent_type):
            raise forms.ValidationError(gettext("The agent and agent_type fields name different agents."))
        data["agent_type"] = spec.agent_type
        if spec.kb_prefix:
            if data["kb"] not in (None, spec.kb_prefix):
                raise forms.ValidationError(gettext("The agent and kb fields name different knowledge bases."))
            try:
                data["kb"] = self._readable_kb(spec.kb_prefix)
            except forms.ValidationError as error:
                self.add_error("kb", error)  # as a KB named in `kb`: a 404, whether missing or private
        return data

    def clean_session_id(self) -> str | None:
        return self.cleaned_data["session_id"] or None

    def has_unknown_kb(self) -> bool:
        return self.has_error("kb", UNKNOWN_KB)

    def first_error(self) -> str:
        return next(iter(e for errors in self.errors.values() for e in errors), gettext("Invalid input."))


class RenameForm(forms.Form):
    title = forms.CharField(max_length=200, strip=True)


class FeedbackForm(forms.Form):
    value = forms.ChoiceField(choices=[("up", "👍"), ("down", "👎")])


class FeedbackApiForm(forms.Form):
    """`POST /api/feedback`: a verdict on one of the caller's answers."""

    message_id = forms.IntegerField(min_value=1)
    is_positive = forms.NullBooleanField()
    comment = forms.CharField(required=False, max_length=4000)
    agent_type = forms.CharField(required=False, max_length=64)
    metadata = forms.JSONField(required=False)

    def clean_is_positive(self) -> bool:
        value = self.cleaned_data["is_positive"]
        if value is None:
            raise forms.ValidationError("is_positive: send true or false.")
        return value

    def clean_metadata(self) -> dict:
        value = self.cleaned_data["metadata"]
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError("metadata: send a JSON object.")
        return value

    def first_error(self) -> str:
        return next(iter(e for errors in self.errors.values() for e in errors), gettext("Invalid input."))


# The JSON type of each field the API's forms read; a value of another type is a 400 that
# names the field, where the form would turn it into a string or drop it.
ASK_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {name: str for name in AskForm.base_fields} | {"clarified": (bool, str)}
FEEDBACK_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "message_id": (int, str), "is_positive": (bool, str), "comment": str, "agent_type": str, "metadata": dict,
}


def chat_request(form: AskForm) -> ChatRequest:
    """Return the pipeline request a valid AskForm describes."""
    data = form.cleaned_data
    options = ChatOptions(kb_slug=data["kb"], agent_type=data["agent_type"], clarified=data["clarified"])
    return ChatRequest(
        user=form.user, session_id=data["session_id"], message=data["message"], options=options
    )
