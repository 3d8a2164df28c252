"""Form widgets of the console's filters that assistive technology can name."""

from django_filters.widgets import DateRangeWidget


class LabelledDateRangeWidget(DateRangeWidget):
    """A from/to pair of date inputs, each with its own accessible name ("Created
    from", "Created to"): one ``<label>`` can name only the first of the two."""

    def __init__(self, what: str, attrs=None):
        self.what = what
        super().__init__(attrs)

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        for subwidget, end in zip(context["widget"]["subwidgets"], ("from", "to"), strict=False):
            subwidget["attrs"]["aria-label"] = f"{self.what} {end}"
        return context
