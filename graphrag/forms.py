"""The explorer's query parameters."""

from __future__ import annotations

from django import forms

from .explorer import BATCH, GraphQuery
from .models import EntityType

MAX_BATCH = 1000  # a client asking for more gets this many


class NamesField(forms.Field):
    """A repeated query parameter (?relation=a&relation=b) of free-text names."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[str]:
        names = (str(name).strip()[:64] for name in value or [])
        return list(dict.fromkeys(name for name in names if name))[:100]


class GraphDataForm(forms.Form):
    offset = forms.IntegerField(min_value=0, required=False)
    limit = forms.IntegerField(min_value=1, required=False)
    type = forms.MultipleChoiceField(choices=EntityType.choices, required=False)
    relation = NamesField(required=False)
    q = forms.CharField(max_length=200, required=False)
    links = forms.ChoiceField(choices=[("all", "all"), ("explicit", "explicit")], required=False)
    order = forms.ChoiceField(choices=[("mentions", "mentions"), ("community", "community")], required=False)

    def clean_limit(self) -> int:
        # A cap, not an error: a client asking for everything gets the largest batch.
        return min(self.cleaned_data["limit"] or BATCH, MAX_BATCH)

    def query(self) -> GraphQuery:
        data = self.cleaned_data
        return GraphQuery(
            offset=data["offset"] or 0, limit=data["limit"], types=tuple(data["type"]),
            relations=tuple(data["relation"]), text=data["q"],
            has_cooccurrence=data["links"] != "explicit", by_community=data["order"] == "community",
        )


class SearchForm(forms.Form):
    q = forms.CharField(max_length=200, required=False)
