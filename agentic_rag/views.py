"""Platform pages: the user's API tokens."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from .models import ApiToken

TOKENS = "agentic_rag/tokens.html"


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


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
    messages.success(request, f"Revoked “{token.name}”.")
    return redirect("token-list")
