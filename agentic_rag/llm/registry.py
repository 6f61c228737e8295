"""Models added in the app (ModelProvider rows): their keys, and when the router must be rebuilt.

Keys are encrypted with Fernet under a key derived from SECRET_KEY: a copy of the database
alone does not reveal them. Changing SECRET_KEY makes stored keys unreadable; the settings
page then says so and asks for the key again. A key named as an environment variable is read
only from a name matching LLM_KEY_ENV_PATTERN: the process's other secrets are never a key.

Every process builds its router once and rebuilds it when the registry's version changes:
a counter in the cache (Redis in the full stack, so every daphne process and worker sees a
change; this process's memory in the embedded default, where the page and the chat share
the process).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from .openai import OpenAICompatibleProvider, Timeouts

log = logging.getLogger(__name__)
VERSION_KEY = "llm-registry-version"


class KeyUnreadable(Exception):
    """The stored key was encrypted under another SECRET_KEY."""


def _fernet():
    from cryptography.fernet import Fernet

    digest = hashlib.sha256(f"model-provider-keys:{settings.SECRET_KEY}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt_key(key: str) -> str:
    return _fernet().encrypt(key.encode()).decode() if key else ""


def decrypt_key(token: str) -> str:
    from cryptography.fernet import InvalidToken

    if not token:
        return ""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise KeyUnreadable("the stored API key cannot be read (SECRET_KEY changed?): enter it again") from exc


@dataclass(frozen=True)
class ProviderKey:
    value: str
    problem: str = ""  # why there is none when one was configured


def is_key_env_allowed(name: str) -> bool:
    """Whether a model's key may be read from the environment variable `name`."""
    return re.fullmatch(settings.LLM_KEY_ENV_PATTERN, name) is not None


def provider_key(row) -> ProviderKey:
    """The API key of a ModelProvider row, from the environment or decrypted."""
    if row.api_key_env and not is_key_env_allowed(row.api_key_env):
        # Rows saved before the rule, or written past the form, are checked on every use.
        return ProviderKey("", f"the environment variable {row.api_key_env} may not hold a model's key")
    if row.api_key_env:
        value = os.environ.get(row.api_key_env, "")
        return ProviderKey(value, "" if value else f"the environment variable {row.api_key_env} is not set")
    try:
        return ProviderKey(decrypt_key(row.api_key_encrypted))
    except KeyUnreadable as exc:
        return ProviderKey("", str(exc))


def provider_for(row) -> OpenAICompatibleProvider:
    """The row as a provider; ValueError when its key variable is not allowed."""
    if row.api_key_env and not is_key_env_allowed(row.api_key_env):
        raise ValueError(provider_key(row).problem)
    timeouts = Timeouts(
        connect_s=row.connect_timeout_s, first_token_s=row.first_token_timeout_s,
        chunk_s=max(row.first_token_timeout_s, 5.0), total_s=row.total_timeout_s,
    )
    return OpenAICompatibleProvider(row.base_url, provider_key(row).value, row.model, timeouts, name=row.name)


def stored_providers() -> list[OpenAICompatibleProvider]:
    """The enabled rows as providers, in order; none when the table is not there yet."""
    from django.db import DatabaseError

    from agentic_rag.models import ModelProvider

    try:
        rows = list(ModelProvider.objects.filter(enabled=True))
    except DatabaseError:  # before migrate
        return []
    providers = []
    for row in rows:
        try:
            providers.append(provider_for(row))
        except ValueError as exc:  # a base URL or key variable that cannot be used; the form refuses those
            log.warning("model %s skipped: %s", row.name, exc)
    return providers


def registry_version() -> int:
    return cache.get(VERSION_KEY, 0)


def registry_changed() -> None:
    """Tell every process to rebuild its router before its next model call."""
    try:
        cache.incr(VERSION_KEY)
    except ValueError:  # not there yet (or evicted)
        cache.set(VERSION_KEY, registry_version() + 1, timeout=None)
