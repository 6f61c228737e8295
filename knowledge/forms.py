"""Forms of the knowledge app: what the web pages accept, validated before any domain call."""

from __future__ import annotations

import dataclasses
import re

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .models import AnswerMode, KnowledgeBase, Visibility
from .retrieval import MODES, RetrievalParams, params_for_kb

# Path segments under /kb/ that a slug may not take, so every URL stays reachable.
RESERVED_SLUGS = frozenset({"new"})

# The models' choices, in the interface's language (the models keep English labels, as
# translating them there would need a migration).
VISIBILITY_CHOICES = [
    (Visibility.PRIVATE.value, _("Private (owner only)")),
    (Visibility.SHARED.value, _("Shared (owner and members)")),
    (Visibility.PUBLIC.value, _("Public (every signed-in user)")),
]
ANSWER_MODE_CHOICES = [
    (AnswerMode.AUTO.value, _("A language model when one answers, else quotes from the sources")),
    (AnswerMode.EXTRACTIVE.value, _("Always quotes from the sources (no language model)")),
]
KB_LABELS = {
    "name": _("Name"),
    "description": _("Description"),
    "visibility": _("Visibility"),
}


class KnowledgeBaseCreateForm(forms.ModelForm):
    class Meta:
        model = KnowledgeBase
        fields = ["name", "slug", "description", "visibility"]
        labels = {**KB_LABELS, "slug": _("Short name")}
        help_texts = {
            "slug": _(
                "Lower-case letters, digits and hyphens, filled in from the name; used in URLs, "
                "the API and the command line. It cannot be changed later."
            )
        }
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3}),
            # app.js fills it from the name until the user types one of their own.
            "slug": forms.TextInput(attrs={"data-slug-from": "id_name"}),
        }
        # Slugs are unique across every owner: "already exists" would confirm that someone
        # else's private knowledge base has this name.
        error_messages = {"slug": {"unique": _("This short name is not available; choose another name.")}}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["visibility"].choices = VISIBILITY_CHOICES

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        if slug != slug.lower():
            raise forms.ValidationError(gettext("Use lower-case letters only."))
        if slug in RESERVED_SLUGS:
            text = gettext("“%(slug)s” is reserved; choose another prefix.")
            raise forms.ValidationError(text % {"slug": slug})
        return slug


class KnowledgeBaseSettingsForm(forms.ModelForm):
    member_usernames = forms.CharField(
        label=_("Members"),
        required=False,
        help_text=_(
            "Usernames separated by commas or spaces. Members may read and upload "
            "when the visibility is not private."
        ),
    )

    class Meta:
        model = KnowledgeBase
        fields = ["name", "description", "visibility", "answer_mode", "answer_model"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        labels = {**KB_LABELS, "answer_mode": _("Answers"), "answer_model": _("Preferred model")}
        help_texts = {
            "answer_mode": _("How the chat writes answers from this knowledge base."),
            "answer_model": _("Tried first for answers; the others follow if it fails."),
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        preferred = self.fields["answer_model"]
        preferred.queryset = preferred.queryset.filter(enabled=True)
        preferred.empty_label = gettext("No preference: the order of the Language models page")
        self.fields["visibility"].choices = VISIBILITY_CHOICES
        self.fields["answer_mode"].choices = ANSWER_MODE_CHOICES
        if self.instance.pk and not self.is_bound:
            names = self.instance.members.order_by("username").values_list("username", flat=True)
            self.initial["member_usernames"] = ", ".join(names)

    def clean_member_usernames(self) -> list:
        raw = self.cleaned_data["member_usernames"]
        names = list(dict.fromkeys(name for name in re.split(r"[\s,]+", raw) if name))
        users = list(get_user_model().objects.filter(username__in=names))
        unknown = sorted(set(names) - {user.username for user in users})
        if unknown:
            raise forms.ValidationError(gettext("No such user: %(names)s.") % {"names": ", ".join(unknown)})
        return [user for user in users if user.pk != self.instance.owner_id]

    def save(self, commit: bool = True) -> KnowledgeBase:
        kb = super().save(commit=commit)
        if commit:
            kb.members.set(self.cleaned_data["member_usernames"])
        return kb


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """A file field that takes several files at once (the pattern from Django's docs)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"multiple": True}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None) -> list:
        clean_one = super().clean
        if isinstance(data, list | tuple) and data:
            return [clean_one(item, initial) for item in data]
        # An empty selection arrives as []: clean None so `required` applies.
        return [clean_one(data or None, initial)]


class UploadForm(forms.Form):
    # allow_empty_file: an empty file is reported per file by check_upload, not as a form error.
    files = MultipleFileField(
        allow_empty_file=True, error_messages={"required": _("Choose at least one file.")}
    )


MODE_LABELS = {"bm25": "BM25", "vector": _("Vector"), "hybrid": _("Hybrid"), "multipath": _("Multi-path")}


class PlaygroundForm(forms.Form):
    """A playground query; options left out of the query string take the KB's settings."""

    q = forms.CharField(
        label=_("Query"),
        required=False,
        widget=forms.TextInput(
            attrs={"type": "search", "placeholder": _("Ask the knowledge base…"), "autocomplete": "off"}
        ),
    )
    mode = forms.ChoiceField(label=_("Mode"), choices=[(mode, MODE_LABELS.get(mode, mode)) for mode in MODES])
    top_k = forms.IntegerField(label="Top k", min_value=1, max_value=20)
    fusion = forms.ChoiceField(
        label=_("Fusion"),
        choices=[("rrf", "RRF (k=60)"), ("weighted", _("Weighted"))],
        help_text=_("Used by hybrid mode."),
    )
    rerank = forms.ChoiceField(label=_("Rerank"), choices=[("on", _("Five-factor")), ("off", _("Off"))])

    def __init__(self, data=None, *, kb: KnowledgeBase) -> None:
        self.defaults = params_for_kb(kb)
        initial = {
            "mode": self.defaults.mode,
            "top_k": self.defaults.top_k,
            "fusion": self.defaults.fusion.mode,
            "rerank": "on" if self.defaults.rerank else "off",
        }
        # A shared link may carry only ?q=: the rest shows, and uses, the KB's settings.
        bound = None if data is None else {**initial, **data.dict()}
        super().__init__(bound, initial=initial)

    def params(self) -> RetrievalParams:
        """Return the KB's retrieval params with this form's choices on top."""
        data = self.cleaned_data
        return dataclasses.replace(
            self.defaults,
            mode=data["mode"],
            top_k=data["top_k"],
            fusion=dataclasses.replace(self.defaults.fusion, mode=data["fusion"]),
            rerank=data["rerank"] == "on",
            max_query_chars=getattr(settings, "RETRIEVAL_MAX_QUERY_CHARS", 1000),
            unfused_paths=True,
        )
