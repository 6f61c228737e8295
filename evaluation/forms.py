"""Forms of the evaluation pages: what they accept, validated before any domain call."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from chat.workers import AGENT_TYPES
from knowledge.models import Document, DocumentStatus, KnowledgeBase
from knowledge.retrieval import MODES

from .models import ANSWERS_MODE, ExpectedShortcut, GoldenQuestion, GoldenSet, RelevantDocument

IMPORT_FORMATS = [
    ("golden", _("Golden questions (JSON about this KB's documents)")),
    ("squad", _("SQuAD (JSON; its passages become documents)")),
    ("beir", _("BEIR (a zip of corpus.jsonl, queries.jsonl and qrels/test.tsv; its passages become documents)")),
]
SHORTCUT_LABELS = {
    ExpectedShortcut.ANSWER: _("answered (no shortcut)"),
    ExpectedShortcut.A: _("A: asks to clarify"),
    ExpectedShortcut.B: _("B: direct system reply"),
    ExpectedShortcut.C: _("C: not found in the knowledge base"),
}


def kinds() -> list[tuple[str, str]]:
    """What a run can measure, in the request's language (the retrieval modes stay as named)."""
    retrieval = [(mode, gettext("Retrieval: %(mode)s") % {"mode": mode}) for mode in MODES]
    return [*retrieval, (ANSWERS_MODE, gettext("Answers through the chat"))]


class RunForm(forms.Form):
    golden_set = forms.ModelChoiceField(
        queryset=GoldenSet.objects.none(), required=False, empty_label=_("Every golden set"), label=_("Questions")
    )
    kind = forms.ChoiceField(choices=kinds, initial="hybrid", label=_("Measure"))
    agent = forms.ChoiceField(
        choices=[(a, a) for a in AGENT_TYPES], initial="auto", label=_("Agent"),
        help_text=_("For answer runs: the worker that retrieves."),
    )

    def __init__(self, kb: KnowledgeBase, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["golden_set"].queryset = kb.golden_sets.order_by("name")


class GoldenSetForm(forms.ModelForm):
    class Meta:
        model = GoldenSet
        fields = ["name"]
        labels = {"name": _("Name")}

    def __init__(self, kb: KnowledgeBase, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kb = kb

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if GoldenSet.objects.filter(kb=self.kb, name=name).exists():
            raise forms.ValidationError(gettext("This knowledge base already has a golden set of that name."))
        return name


class ImportForm(forms.Form):
    file = forms.FileField(label=_("File"))
    format = forms.ChoiceField(choices=IMPORT_FORMATS, initial="golden", label=_("Format"))


class QuestionForm(forms.ModelForm):
    """One golden question: keywords one per line ("a | b" for alternatives), sources by document."""

    keywords = forms.CharField(
        label=_("Expected keywords"), required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_('One per line; "8 | eight" accepts either.'),
    )
    relevant = forms.ModelMultipleChoiceField(
        queryset=Document.objects.none(), required=False, label=_("Relevant documents"),
        widget=forms.SelectMultiple(attrs={"size": 6}),
    )

    class Meta:
        model = GoldenQuestion
        fields = ["qid", "text", "category", "expected_shortcut"]
        labels = {
            "qid": _("Id"), "text": _("Question"), "category": _("Category"), "expected_shortcut": _("Expected behaviour"),
        }
        help_texts = {
            "expected_shortcut": _("What the chat should do, scored by answer evaluation; blank when not stated."),
        }
        widgets = {"text": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, golden_set: GoldenSet, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.golden_set = golden_set
        self.fields["relevant"].queryset = golden_set.kb.documents.filter(status=DocumentStatus.READY).order_by("name")
        self.fields["expected_shortcut"].choices = [
            ("", gettext("not stated")), *((value, SHORTCUT_LABELS.get(value, label)) for value, label in ExpectedShortcut.choices)
        ]
        if self.instance.pk and not self.is_bound:
            self.initial["keywords"] = "\n".join(self.instance.keyword_labels)
            self.initial["relevant"] = [q.document_id for q in self.instance.qrels.filter(relevance__gt=0)]

    def clean_qid(self) -> str:
        qid = self.cleaned_data["qid"].strip()
        taken = GoldenQuestion.objects.filter(golden_set=self.golden_set, qid=qid).exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError(gettext("Another question of this set has that id."))
        return qid

    def clean_keywords(self) -> list[str | list[str]]:
        keywords: list[str | list[str]] = []
        for line in self.cleaned_data["keywords"].splitlines():
            alternatives = [a.strip() for a in line.split("|") if a.strip()]
            if alternatives:
                keywords.append(alternatives[0] if len(alternatives) == 1 else alternatives)
        return keywords

    def clean(self) -> dict:
        data = super().clean()
        if not data.get("relevant") and data.get("expected_shortcut") in ("", ExpectedShortcut.ANSWER):
            raise forms.ValidationError(gettext("Choose the documents that answer it, or the shortcut it should take."))
        return data

    def save(self, commit: bool = True) -> GoldenQuestion:
        question = super().save(commit=False)
        question.golden_set = self.golden_set
        question.expected_keywords = self.cleaned_data["keywords"]
        question.save()
        question.qrels.all().delete()
        RelevantDocument.objects.bulk_create(
            RelevantDocument(question=question, document=document, relevance=1) for document in self.cleaned_data["relevant"]
        )
        return question

