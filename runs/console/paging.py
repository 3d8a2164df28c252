"""One pagination helper for every console list (with ``partials/pager.html``)."""

from django.core.paginator import Page, Paginator

#: Rows per page of a console list.
PAGE_SIZE = 50


class NamedPage(Page):
    """A console page that knows the query parameter naming it (``param``), for the
    pager's links."""

    param: str


def paginate(request, queryset, *, param: str = "page", per_page: int = PAGE_SIZE) -> NamedPage:
    """The page of ``queryset`` named by ``request.GET[param]`` (the last page for a
    number past the end, the first for anything else that is not a page number).
    ``queryset`` must be ordered with a unique tie-breaker, or pages may repeat rows.
    The page's ``param`` attribute names the query parameter for the pager's links."""
    found = Paginator(queryset, per_page).get_page(request.GET.get(param))
    page = NamedPage(list(found.object_list), found.number, found.paginator)
    page.param = param
    return page
