"""What every portal page's template gets, and how service errors become a message on the page."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.access import Principal


def page(
    request: HttpRequest,
    template: str,
    principal: Principal,
    section: str,
    status: int = 200,
    **context: Any,
) -> HttpResponse:
    """Render a portal page; `section` marks the active nav link."""
    context.update({"principal": principal, "section": section})
    return render(request, template, context, status=status)


def error_message(error: Exception) -> str:
    """A service error's own message (ApiError and the ledger's lookup error both carry one)."""
    return str(getattr(error, "message", "") or error)


def is_htmx(request: HttpRequest) -> bool:
    """An htmx request (django_htmx's middleware sets `request.htmx`): answer with a fragment."""
    return bool(getattr(request, "htmx", False))


PAGE_SIZE = 50


def paginate(request: HttpRequest, rows: QuerySet[Any], per_page: int = PAGE_SIZE) -> Page:
    """One page of a list (`?page=N`; a bad or too large N gives the nearest page, never an error)."""
    return Paginator(rows, per_page).get_page(request.GET.get("page"))
