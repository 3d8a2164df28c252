"""Pages of one section of a long page (the run page's steps, messages, checkpoints...).

A run with 10,000 loop iterations must not render 10,000 rows per section: each
section shows one page, newest first, and links to the older and newer pages with its
own query parameter, so the sections page independently and keep the other filters.
"""

from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.http import HttpRequest


@dataclass
class Section:
    """One page of a section: ``rows`` to show (in display order), ``page`` (Django's),
    and the query strings of the ``newer`` and ``older`` pages ("" when none)."""

    rows: list
    page: Page
    param: str
    newer: str = ""
    older: str = ""

    @property
    def total(self) -> int:
        return self.page.paginator.count


def section(
    request: HttpRequest, queryset, *, param: str, size: int, oldest_first: bool = True
) -> Section:
    """Page ``param`` (1 = newest) of ``queryset``, which must be ordered newest first
    with a unique tie-breaker. ``oldest_first`` shows the page's rows in chronological
    order (a log reads downwards); the page itself is still chosen from the newest."""
    page = Paginator(queryset, size).get_page(request.GET.get(param))
    rows = list(page.object_list)
    if oldest_first:
        rows.reverse()

    def query(number: int) -> str:
        params = request.GET.copy()
        params.pop("shown_version", None)
        params[param] = str(number)
        return params.urlencode()

    return Section(
        rows=rows,
        page=page,
        param=param,
        newer=query(page.previous_page_number()) if page.has_previous() else "",
        older=query(page.next_page_number()) if page.has_next() else "",
    )
