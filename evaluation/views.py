"""Evaluation in the browser: golden sets (create, edit, import, export), runs started as
background tasks with live progress, runs side by side, charts, failures linked to traces.

Readers of a KB see its sets and runs; writers change sets and start runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from knowledge.models import KnowledgeBase
from knowledge.views import _get_kb_for_user, _get_rw_kb_for_user

from .datasets import DatasetError, export_golden_set, import_dataset, read_beir_zip, read_golden, read_squad
from .forms import GoldenSetForm, ImportForm, QuestionForm, RunForm
from .jobs import RunRequest, queue_run
from .models import ANSWERS_MODE, GoldenQuestion
from .pages import (
    category_chart,
    compare,
    failures,
    feedback_candidates,
    feedback_initial,
    headline,
    run_charts,
)
from .tasks import dispatch_evaluation

HOME = "evaluation/home.html"
RUN = "evaluation/run.html"
GOLDEN_SET = "evaluation/golden_set.html"
QUESTION = "evaluation/question.html"
READERS = {
    "golden": read_golden,
    "squad": read_squad,
    # Unpacked, a BEIR zip may hold no more than one plain upload could.
    "beir": lambda path: read_beir_zip(path, max_bytes=settings.MAX_UPLOAD_BYTES),
}
RUNS_SHOWN = 30


@login_required
@require_GET
def evaluation_home(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    return render(request, HOME, _home_context(request, kb))


@login_required
@require_POST
def run_start(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    form = RunForm(kb, request.POST)
    if not form.is_valid():
        return render(request, HOME, _home_context(request, kb, run_form=form), status=400)
    data = form.cleaned_data
    run = queue_run(kb, RunRequest(data["golden_set"], data["kind"], data["agent"]), request.user, dispatch_evaluation)
    messages.success(request, _("Run #%(pk)s started in the background; its row shows the progress.") % {"pk": run.pk})
    return redirect("evaluation-home", kb.slug)


@login_required
@require_GET
def run_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    run = get_object_or_404(kb.evaluation_runs.select_related("golden_set"), pk=pk)
    if request.htmx:  # a running row polls for its progress
        response = render(request, f"{HOME}#run-row", {"kb": kb, "run": run, "figures": headline(run)})
        patch_vary_headers(response, ["HX-Request"])
        return response
    questions = GoldenQuestion.objects.filter(golden_set__kb=kb)
    if run.golden_set_id:
        questions = questions.filter(golden_set=run.golden_set_id)
    questions = list(questions.only("qid", "text", "category"))
    context = {
        "kb": kb, "run": run, "figures": headline(run),
        "categories": category_chart(run, questions),
        "failures": failures(run, {q.qid: q.text for q in questions}),
    }
    response = render(request, RUN, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_POST
def golden_set_create(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    form = GoldenSetForm(kb, request.POST)
    if not form.is_valid():
        return render(request, HOME, _home_context(request, kb, set_form=form), status=400)
    golden_set = form.save(commit=False)
    golden_set.kb = kb
    golden_set.save()
    return redirect("evaluation-set", kb.slug, golden_set.pk)


@login_required
@require_POST
def golden_set_import(request: HttpRequest, slug: str) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return render(request, HOME, _home_context(request, kb, import_form=form), status=400)
    upload = form.cleaned_data["file"]
    with tempfile.TemporaryDirectory() as folder:
        # The readers name the set after the file when it names none: keep the upload's name.
        path = Path(folder) / Path(upload.name).name
        with path.open("wb") as out:
            for piece in upload.chunks():
                out.write(piece)
        try:
            dataset = READERS[form.cleaned_data["format"]](path)
        except DatasetError as exc:
            form.add_error("file", str(exc).replace(str(path), upload.name))
            return render(request, HOME, _home_context(request, kb, import_form=form), status=400)
    report = import_dataset(kb, dataset, user=request.user)
    golden_set = kb.golden_sets.get(name=dataset.name)
    values = {"count": report.questions, "name": golden_set.name, "skipped": report.skipped_questions}
    if report.skipped_questions:
        message = ngettext(
            "Imported %(count)s question into “%(name)s”; %(skipped)s skipped (no relevant document in this KB).",
            "Imported %(count)s questions into “%(name)s”; %(skipped)s skipped (no relevant document in this KB).",
            report.questions,
        )
    else:
        message = ngettext(
            "Imported %(count)s question into “%(name)s”.", "Imported %(count)s questions into “%(name)s”.", report.questions
        )
    messages.success(request, message % values)
    return redirect("evaluation-set", kb.slug, golden_set.pk)


@login_required
@require_http_methods(["GET", "POST"])
def golden_set_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    golden_set = get_object_or_404(kb.golden_sets, pk=pk)
    form = None
    if request.method == "POST":
        kb = _get_rw_kb_for_user(request, slug)
        form = QuestionForm(golden_set, request.POST)
        if form.is_valid():
            question = form.save()
            messages.success(request, _("Added question %(qid)s.") % {"qid": question.qid})
            return redirect("evaluation-set", kb.slug, golden_set.pk)
    if form is None:
        form = QuestionForm(golden_set, initial=_feedback_draft(request, kb))
    context = {
        "kb": kb, "golden_set": golden_set, "can_write": kb.is_writable_by(request.user),
        "questions": golden_set.questions.prefetch_related("qrels__document").order_by("qid"),
        "form": form,
    }
    return render(request, GOLDEN_SET, context, status=400 if form.is_bound else 200)


@login_required
@require_GET
def feedback_to_golden_set(request: HttpRequest, slug: str) -> HttpResponse:
    """From the list of thumbs-down answers to the chosen set's form, drafted from the answer."""
    kb = _get_rw_kb_for_user(request, slug)
    golden_set = get_object_or_404(kb.golden_sets, pk=request.GET.get("set") or 0)
    feedback = request.GET.get("feedback", "")
    url = reverse("evaluation-set", args=[kb.slug, golden_set.pk])
    return redirect(f"{url}?feedback={feedback}#add-title" if feedback.isdigit() else url)


@login_required
@require_GET
def golden_set_export(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_kb_for_user(request, slug)
    golden_set = get_object_or_404(kb.golden_sets, pk=pk)
    response = HttpResponse(export_golden_set(golden_set), content_type="application/json; charset=utf-8")
    filename = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in golden_set.name) or "golden-set"
    response["Content-Disposition"] = f'attachment; filename="{filename}.json"'
    return response


@login_required
@require_POST
def golden_set_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    golden_set = get_object_or_404(kb.golden_sets, pk=pk)
    golden_set.delete()
    messages.success(request, _("Deleted the golden set “%(name)s”; its runs are kept.") % {"name": golden_set.name})
    return redirect("evaluation-home", kb.slug)


@login_required
@require_http_methods(["GET", "POST"])
def question_edit(request: HttpRequest, slug: str, pk: int, question_pk: int) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    question = get_object_or_404(GoldenQuestion.objects.filter(golden_set__kb=kb, golden_set=pk), pk=question_pk)
    form = QuestionForm(question.golden_set, request.POST or None, instance=question)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Saved question %(qid)s.") % {"qid": question.qid})
        return redirect("evaluation-set", kb.slug, pk)
    status = 400 if request.method == "POST" else 200
    return render(request, QUESTION, {"kb": kb, "golden_set": question.golden_set, "question": question, "form": form}, status=status)


@login_required
@require_POST
def question_delete(request: HttpRequest, slug: str, pk: int, question_pk: int) -> HttpResponse:
    kb = _get_rw_kb_for_user(request, slug)
    question = get_object_or_404(GoldenQuestion.objects.filter(golden_set__kb=kb, golden_set=pk), pk=question_pk)
    question.delete()
    messages.success(request, _("Deleted question %(qid)s.") % {"qid": question.qid})
    return redirect("evaluation-set", kb.slug, pk)


def _feedback_draft(request: HttpRequest, kb: KnowledgeBase) -> dict | None:
    feedback = request.GET.get("feedback", "")
    return feedback_initial(kb, request.user, int(feedback)) if feedback.isdigit() else None


def _home_context(request: HttpRequest, kb: KnowledgeBase, **forms) -> dict:
    runs = list(kb.evaluation_runs.select_related("golden_set", "kb")[:RUNS_SHOWN])
    chosen = {int(pk) for pk in request.GET.getlist("compare") if pk.isdigit()}
    compared = [run for run in runs if run.pk in chosen][::-1]
    metrics, config = compare(compared) if len(compared) >= 2 else ([], [])
    return {
        "kb": kb,
        "can_write": kb.is_writable_by(request.user),
        "golden_sets": kb.golden_sets.annotate(question_count=Count("questions")).order_by("name"),
        "runs": [(run, headline(run)) for run in runs],
        "charts": run_charts(runs),
        "compared": compared, "compared_metrics": metrics, "compared_config": config,
        "run_form": forms.get("run_form") or RunForm(kb),
        "set_form": forms.get("set_form") or GoldenSetForm(kb),
        "import_form": forms.get("import_form") or ImportForm(),
        "answers_mode": ANSWERS_MODE,
        "candidates": feedback_candidates(kb, request.user) if kb.is_writable_by(request.user) else [],
    }
