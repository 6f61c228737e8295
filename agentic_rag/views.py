"""Platform pages: the user's API tokens, and the language models (staff)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from . import model_settings, web_settings
from .llm import get_llm
from .model_settings import ModelProviderForm
from .models import ApiToken, ModelProvider
from .web_settings import WebSearchSettingsForm

TOKENS = "agentic_rag/tokens.html"


class TokenForm(forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=100, strip=True)


def _get_token_for_user(request: HttpRequest, pk: int) -> ApiToken:
    return get_object_or_404(ApiToken.objects.for_user(request.user), pk=pk)


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    new_key = ""
    if request.method == "POST" and form.is_valid():
        token, new_key = ApiToken.issue(request.user, form.cleaned_data["name"])
        form = TokenForm()
    tokens = ApiToken.objects.for_user(request.user)
    context = {"form": form, "tokens": tokens, "new_key": new_key}
    return render(request, TOKENS, context, status=400 if form.errors else 200)


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = _get_token_for_user(request, pk)
    token.revoke()
    if request.htmx:
        return render(request, f"{TOKENS}#token-row", {"token": token})
    messages.success(request, _("Revoked “%(name)s”.") % {"name": token.name})
    return redirect("token-list")


# --- language models (staff) ---------------------------------------------------------------

MODELS = "agentic_rag/models.html"
MODEL_FORM = "agentic_rag/model_form.html"


def _staff_only(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied  # the models serve every user; only staff may change them


@login_required
@require_http_methods(["GET", "POST"])
def model_list(request: HttpRequest) -> HttpResponse:
    _staff_only(request)
    form = ModelProviderForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        row = form.save()
        messages.success(
            request, _("Added %(name)s. Test it below; the chat uses it from the next question on.") % {"name": row.name}
        )
        return redirect("model-list")
    return _models_page(request, form, WebSearchSettingsForm(instance=web_settings.current_row(), user=request.user))


def _models_page(request: HttpRequest, form: ModelProviderForm, web_form: WebSearchSettingsForm) -> HttpResponse:
    context = {
        "form": form, "statuses": model_settings.model_statuses(), "has_model": get_llm().has_model,
        "web_form": web_form, "web_status": web_settings.web_search_status(),
    }
    return render(request, MODELS, context, status=400 if form.errors or web_form.errors else 200)


@login_required
@require_POST
def web_search_save(request: HttpRequest) -> HttpResponse:
    _staff_only(request)
    web_form = WebSearchSettingsForm(request.POST, instance=web_settings.current_row(), user=request.user)
    if not web_form.is_valid():
        return _models_page(request, ModelProviderForm(user=request.user), web_form)
    web_form.save()
    messages.success(request, _("Saved the web search settings; the chat uses them from the next question on."))
    return redirect("model-list")


@login_required
@require_http_methods(["GET", "POST"])
def model_edit(request: HttpRequest, pk: int) -> HttpResponse:
    _staff_only(request)
    row = get_object_or_404(ModelProvider, pk=pk)
    form = ModelProviderForm(request.POST or None, instance=row, user=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, _("Saved %(name)s.") % {"name": row.name})
        return redirect("model-list")
    return render(request, MODEL_FORM, {"form": form, "row": row}, status=400 if form.errors else 200)


@login_required
@require_POST
def model_move(request: HttpRequest, pk: int, direction: str) -> HttpResponse:
    _staff_only(request)
    model_settings.move(get_object_or_404(ModelProvider, pk=pk), -1 if direction == "up" else 1)
    return redirect("model-list")


@login_required
@require_POST
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _staff_only(request)
    row = get_object_or_404(ModelProvider, pk=pk)
    model_settings.delete(row)
    messages.success(request, _("Removed %(name)s.") % {"name": row.name})
    return redirect("model-list")


@login_required
@require_POST
def model_test(request: HttpRequest, pk: int) -> HttpResponse:
    _staff_only(request)
    row = get_object_or_404(ModelProvider, pk=pk)
    result = model_settings.check_connection(row)
    return render(request, f"{MODELS}#test-result", {"row": row, "result": result})
