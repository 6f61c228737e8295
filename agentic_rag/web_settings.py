"""The web search section of the Language models page (staff): which provider, where, which
domains, how long to wait. Saved once, the row replaces the environment's WEB_SEARCH_*.

As with models, a key comes only from an environment variable named …_API_KEY, and only a
superuser may name one. A provider on an inside address (localhost, a private network) must
also be on the deployment's WEB_FETCH_ALLOW_HOSTS: the page cannot open the inside network.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .llm.registry import is_key_env_allowed
from .models import WebSearchSettings

MAX_RESULTS = 20
MAX_PAGES = 10
MAX_TIMEOUT_S = 60.0


class WebSearchSettingsForm(forms.ModelForm):
    prefix = "web"  # the model form on the same page has fields of the same names
    base_url = forms.URLField(label=_("Base URL"), max_length=500, required=False, assume_scheme="https")

    class Meta:
        model = WebSearchSettings
        fields = ["enabled", "provider", "base_url", "api_key_env", "allow_domains", "deny_domains", "max_results",
                  "pages_per_query", "connect_timeout_s", "read_timeout_s", "total_timeout_s"]
        labels = {
            "enabled": _("Search the web"),
            "provider": _("Provider"),
            "base_url": _("Base URL"),
            "api_key_env": _("API key from environment variable"),
            "allow_domains": _("Only these domains"),
            "deny_domains": _("Never these domains"),
            "max_results": _("Results kept per query"),
            "pages_per_query": _("Pages read per query"),
            "connect_timeout_s": _("Connect timeout (s)"),
            "read_timeout_s": _("Read timeout (s)"),
            "total_timeout_s": _("Total timeout per query (s)"),
        }
        help_texts = {
            "enabled": _("Off by default. When on, DeepSearch also searches the web each round, and the web_search "
                         "tool answers; web pages are cited with their URL and checked like documents."),
            "base_url": _("SearXNG: its address, with JSON output switched on (search.formats in settings.yml). "
                          "Brave: leave empty. An inside address must be on WEB_FETCH_ALLOW_HOSTS."),
            "api_key_env": _("Brave: a variable ending in _API_KEY that holds the key. Only a superuser may name one."),
            "allow_domains": _("One per line; a domain covers its subdomains. Empty: any domain."),
            "deny_domains": _("One per line; wins over the list above."),
        }
        widgets = {
            "allow_domains": forms.Textarea(attrs={"rows": 2}),
            "deny_domains": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, *args, user: Any, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_api_key_env(self) -> str:
        name = self.cleaned_data["api_key_env"].strip()
        if name and not is_key_env_allowed(name):
            raise forms.ValidationError(gettext("Name a variable ending in _API_KEY (such as BRAVE_API_KEY)."))
        if name != self.instance.api_key_env and not self.user.is_superuser:
            raise forms.ValidationError(gettext("Only a superuser may send a key from the environment to a provider."))
        return name

    def clean_base_url(self) -> str:
        from chat.web.config import environment_config
        from chat.web.fetch import FetchPolicy, WebError, check_url, resolve_host

        url = self.cleaned_data["base_url"].rstrip("/")
        if url:
            deployment = environment_config()  # the inside hosts only the deployment can open
            policy = FetchPolicy(allow_hosts=deployment.allow_hosts + deployment.provider_hosts)
            try:
                check_url(url, policy, resolve=resolve_host)
            except WebError as error:
                raise forms.ValidationError(str(error)) from None
        return url

    def clean(self) -> dict:
        data = super().clean()
        if data.get("enabled") and data.get("provider") == WebSearchSettings.Provider.SEARXNG and not data.get("base_url"):
            self.add_error("base_url", gettext("SearXNG needs its address."))
        for name, top in (("max_results", MAX_RESULTS), ("pages_per_query", MAX_PAGES)):
            if data.get(name) is not None and not 0 < data[name] <= top:
                self.add_error(name, gettext("Use a number from 1 to %(top)s.") % {"top": top})
        for name in ("connect_timeout_s", "read_timeout_s", "total_timeout_s"):
            if data.get(name) is not None and not 0 < data[name] <= MAX_TIMEOUT_S:
                self.add_error(name, gettext("Use a number of seconds between 0 and 60."))
        return data


def current_row() -> WebSearchSettings:
    """The saved row, or an unsaved one holding the defaults (off)."""
    return WebSearchSettings.objects.first() or WebSearchSettings()


def web_search_status() -> str:
    """One line for the page: whether the chat searches the web, with what, set where."""
    from chat.web.config import web_search_config

    config = web_search_config()
    where = gettext("set on this page") if WebSearchSettings.objects.exists() else gettext("set in the environment")
    if not config.is_enabled:
        return gettext("Off (%(where)s).") % {"where": where}
    return gettext("On: %(provider)s %(url)s (%(where)s).") % {
        "provider": config.provider, "url": config.base_url, "where": where,
    }
