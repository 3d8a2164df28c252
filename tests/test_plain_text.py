"""Docstring markup a tool's author wrote for Sphinx or a README is not shown to the
approver: ``plain_text`` removes every kind of inline markup and keeps the words,
identifiers and anything that only looks like markup to a browser (escaped later)."""

import pytest

from approvals.argument_form import fields_for
from approvals.plain_text import plain_text


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("Refund ``amount`` USD of order ``order_id``.", "Refund amount USD of order order_id."),
        ("Uses `order_id` as the key.", "Uses order_id as the key."),
        ("See :func:`~shop.refund` and :class:`Order`.", "See shop.refund and Order."),
        ("Read `the guide <https://example.org/g>`_ first.", "Read the guide first."),
        ("Read [the guide](https://example.org/g) first.", "Read the guide first."),
        ("This is **final** and *cannot* be __undone__.", "This is final and cannot be undone."),
        (
            "Keep snake_case_names and 2 * 3 * 4 as they are.",
            "Keep snake_case_names and 2 * 3 * 4 as they are.",
        ),
        ("Two\n    lines\n\n    and a paragraph.", "Two lines and a paragraph."),
        ("<script>alert(1)</script> ``x``", "<script>alert(1)</script> x"),
        ("", ""),
    ],
)
def test_inline_markup_is_removed_and_the_words_kept(written, shown):
    assert plain_text(written) == shown


def test_a_schema_fields_description_is_shown_as_plain_text():
    schema = {
        "type": "object",
        "properties": {"amount": {"type": "number", "description": "USD, ``> 0``"}},
    }
    [field] = fields_for(schema, {"amount": 1})
    assert field.description == "USD, > 0"
