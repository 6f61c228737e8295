"""The language-model settings page (staff): add, order, test and remove the models the chat
may use, and see each one's circuit breaker and last failures in this process.

A key is sent only where it was saved. Staff may point a model anywhere with a key they type;
naming an environment variable's key, or moving a kept key to another base URL, needs a
superuser, since that key is the deployment's and not theirs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.db import transaction
from django.db.models import Max
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .llm import CompletionOptions, LLMError, Message, get_llm
from .llm.openai import OpenAICompatibleProvider
from .llm.registry import encrypt_key, is_key_env_allowed, provider_for, provider_key, registry_changed
from .models import ModelProvider

TEST_PROMPT = (Message("user", "Reply with the single word OK."),)
TEST_TIMEOUT_S = 15.0


class ModelProviderForm(forms.ModelForm):
    base_url = forms.URLField(
        label=_("Base URL"), max_length=500, assume_scheme="https", help_text=_("For example https://api.deepseek.com/v1.")
    )
    api_key = forms.CharField(
        label=_("API key"), required=False, strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_(
            "Stored encrypted; never shown again. Leave it empty to keep the stored key, or to name an environment "
            "variable below instead."
        ),
    )
    clear_key = forms.BooleanField(label=_("Remove the stored key"), required=False)

    field_order = ["name", "base_url", "model", "api_key", "clear_key", "api_key_env"]

    class Meta:
        model = ModelProvider
        fields = ["name", "base_url", "model", "api_key_env", "connect_timeout_s", "first_token_timeout_s",
                  "total_timeout_s", "enabled"]
        labels = {
            "name": _("Name"),
            "model": _("Model"),
            "api_key_env": _("API key from environment variable"),
            "connect_timeout_s": _("Connect timeout (s)"),
            "first_token_timeout_s": _("First token timeout (s)"),
            "total_timeout_s": _("Total timeout (s)"),
            "enabled": _("Enabled"),
        }
        help_texts = {
            "name": _("Shown in traces and on the settings page."),
            "api_key_env": _(
                "The name of an environment variable holding the key, instead of storing it: a name ending in "
                "_API_KEY. Only a superuser may name one."
            ),
        }

    def __init__(self, *args, user: Any, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        if not self.instance.api_key_encrypted:
            del self.fields["clear_key"]  # nothing stored to remove

    def clean_api_key_env(self) -> str:
        name = self.cleaned_data["api_key_env"].strip()
        if name and not is_key_env_allowed(name):
            raise forms.ValidationError(
                gettext("Name a variable ending in _API_KEY (such as DEEPSEEK_API_KEY): %(name)s may hold "
                        "one of the server's own secrets.") % {"name": name}
            )
        return name

    def clean_base_url(self) -> str:
        url = self.cleaned_data["base_url"].rstrip("/")
        try:  # the provider's own check: http(s) with a host
            OpenAICompatibleProvider(url, "", "probe")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return url

    def clean(self) -> dict:
        data = super().clean()
        for field in ("connect_timeout_s", "first_token_timeout_s", "total_timeout_s"):
            value = data.get(field)
            if value is not None and not 0 < value <= 600:
                self.add_error(field, gettext("Use a number of seconds between 0 and 600."))
        if not self.user.is_superuser:
            self._keep_keys_where_saved(data)
        return data

    def _keep_keys_where_saved(self, data: dict) -> None:
        """Refuse to send a key this person did not type to an address it was not saved with."""
        row, name, url = self.instance, data.get("api_key_env"), data.get("base_url")
        if url is None:
            return  # the base URL itself was refused
        is_moved = row.pk is None or url != row.base_url
        if name and (is_moved or name != row.api_key_env):
            self.add_error("api_key_env", gettext("Only a superuser may send a key from the environment to a model."))
        elif not name and is_moved and row.api_key_encrypted and not (data.get("api_key") or data.get("clear_key")):
            self.add_error("base_url", gettext(
                "Only a superuser may send the stored key to another address: enter the key again, or remove it."
            ))

    def save(self, commit: bool = True) -> ModelProvider:
        row = super().save(commit=False)
        if self.cleaned_data.get("clear_key"):
            row.api_key_encrypted = ""
        if self.cleaned_data.get("api_key"):
            row.api_key_encrypted = encrypt_key(self.cleaned_data["api_key"])
        if row.pk is None:
            row.position = (ModelProvider.objects.aggregate(last=Max("position"))["last"] or 0) + 1
        with transaction.atomic():
            row.save()
            transaction.on_commit(registry_changed)
        return row


@dataclass(frozen=True)
class ModelStatus:
    """What the page shows of one model: where its key comes from and how it is doing here."""

    row: ModelProvider | None  # None: the model configured by the environment
    name: str
    model: str
    base_url: str
    key: str  # "stored", "from $NAME", "none", or why it cannot be used
    breaker: str
    failure_percent: int  # of this process's calls in the breaker's window
    failures: list[tuple[datetime, str]]

    @property
    def breaker_label(self) -> str:
        """The breaker's state as shown; `breaker` itself stays the CSS hook."""
        return str(BREAKER_LABELS.get(self.breaker, self.breaker))


BREAKER_LABELS = {
    "closed": _("closed"),
    "open": _("open"),
    "half_open": _("half open"),
    "disabled": _("disabled"),
    "not in use": _("not in use"),
}


def model_statuses() -> list[ModelStatus]:
    """Every model in the router's order: the environment's first, then the page's rows."""
    router = get_llm()
    rows = list(ModelProvider.objects.all())
    stored = {row.name for row in rows}
    live = {provider.name for provider in router.providers}
    statuses = [
        _status(None, provider.name, getattr(provider, "model", ""), getattr(provider, "base_url", ""), gettext("from the environment"), router)
        for provider in router.providers if provider.name not in stored
    ]
    for row in rows:
        statuses.append(_status(row, row.name, row.model, row.base_url, _key_label(row), router if row.name in live else None))
    return statuses


def _status(row, name: str, model: str, base_url: str, key: str, router: Any) -> ModelStatus:
    if router is None:
        return ModelStatus(row, name, model, base_url, key, "disabled" if row and not row.enabled else "not in use", 0, [])
    breaker = router.breaker(name)
    failures = [(datetime.fromtimestamp(at, tz=UTC), error) for at, error in router.recent_failures(name)]
    return ModelStatus(row, name, model, base_url, key, str(breaker.state), round(100 * breaker.failure_rate), failures)


def _key_label(row: ModelProvider) -> str:
    key = provider_key(row)
    if key.problem:
        return key.problem
    if row.api_key_env:
        return gettext("from $%(name)s") % {"name": row.api_key_env}
    return gettext("stored, encrypted") if key.value else gettext("none")


def move(row: ModelProvider, step: int) -> None:
    """Swap the row with its neighbour up (-1) or down (+1) in the router's order."""
    rows = list(ModelProvider.objects.all())
    at = rows.index(row)
    other = at + step
    if not 0 <= other < len(rows):
        return
    rows[at], rows[other] = rows[other], rows[at]
    with transaction.atomic():
        for position, item in enumerate(rows, 1):
            if item.position != position:
                ModelProvider.objects.filter(pk=item.pk).update(position=position)
        transaction.on_commit(registry_changed)


def delete(row: ModelProvider) -> None:
    with transaction.atomic():
        row.delete()
        transaction.on_commit(registry_changed)


@dataclass(frozen=True)
class ConnectionCheck:
    ok: bool
    ms: float
    text: str  # the model's reply, or the error


def check_connection(row: ModelProvider) -> ConnectionCheck:
    """Ask the model for one word, outside the router (no retries, no breaker)."""
    key = provider_key(row)
    if key.problem:
        return ConnectionCheck(False, 0.0, key.problem)
    provider = provider_for(row)
    started = time.perf_counter()
    try:
        completion = provider.complete(list(TEST_PROMPT), CompletionOptions(max_tokens=5, timeout_s=min(row.total_timeout_s, TEST_TIMEOUT_S)))
    except LLMError as exc:
        return ConnectionCheck(False, (time.perf_counter() - started) * 1000, str(exc))
    return ConnectionCheck(True, (time.perf_counter() - started) * 1000, completion.text.strip()[:200] or gettext("(an empty reply)"))
