"""The value check: what the engine writes round-trips through JSON and both databases
unchanged, NUL is escaped, anything else is refused with its path and type."""

import json
from collections import OrderedDict
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from runs.engine.state.values import (
    INVALID_OUTPUT,
    NUL_ESCAPE,
    InvalidValue,
    problem,
    storable,
    storable_text,
)
from runs.models import Event, Run
from runs.states import RunStatus
from tests.support.in_process import start_room_temperature

GOOD = {
    "text": "héllo ☃ 🙂",
    "n": -(2**62),
    "x": 0.1,
    "big": 9007199254740993,
    "small": 1.5e-300,
    "ok": True,
    "none": None,
    "nested": [{"a": [1, 2.5, "b"]}, []],
    "status": RunStatus.SUCCEEDED,
    "ordered": OrderedDict(b=1, a=2),
}


@pytest.mark.parametrize(
    ("value", "path", "type_name"),
    [
        ({"score": float("nan")}, "$.score", "float"),
        ({"score": [1, float("inf")]}, "$.score[1]", "float"),
        ({"at": datetime(2026, 1, 1, tzinfo=UTC)}, "$.at", "datetime"),
        ({"by_id": {1: "a"}}, "$.by_id[1]", "int"),
        ({"pair": (1, 2)}, "$.pair", "tuple"),
        ({"tags": {"a"}}, "$.tags", "set"),
        ({"raw": b"\x00\x01"}, "$.raw", "bytes"),
        ({"price": Decimal("1.10")}, "$.price", "Decimal"),
        ({"odd key": {"x": "\ud800"}}, "$['odd key'].x", "str"),
        (float("-inf"), "$", "float"),
        ({"big": 1e300}, "$.big", "float"),
    ],
)
def test_it_refuses_a_value_that_cannot_round_trip_with_its_path_and_type(value, path, type_name):
    with pytest.raises(InvalidValue) as caught:
        storable(value, where="output")
    exc = caught.value
    assert (exc.code, exc.path, exc.type_name) == (INVALID_OUTPUT, path, type_name)
    assert f"output at {path}" in exc.detail
    assert problem(value)[:2] == (path, type_name)


def test_it_refuses_a_value_nested_too_deep():
    value: list = []
    for _ in range(500):
        value = [value]
    with pytest.raises(InvalidValue):
        storable(value)


def test_it_escapes_nul_in_text_and_keys():
    assert storable({"k\x00": ["bad\x00byte"]}) == {f"k{NUL_ESCAPE}": [f"bad{NUL_ESCAPE}byte"]}
    assert storable_text("bad\x00byte") == "bad\\u0000byte"
    assert storable_text("lone \ud800") == "lone \\ud800"


def test_it_accepts_what_json_round_trips():
    assert storable(GOOD) == GOOD
    assert json.loads(json.dumps(storable(GOOD))) == GOOD
    assert problem(GOOD) is None


@pytest.mark.django_db
def test_it_stores_a_checked_value_and_nul_text_unchanged_in_the_database():
    run = start_room_temperature()
    value = storable({**GOOD, "nul": "bad\x00byte"})
    event = Event.objects.create(run=run, seq=10_000, type="test.value", payload=value)
    Run.objects.filter(pk=run.pk).update(goal=storable_text("goal\x00end"))
    event.refresh_from_db()
    assert event.payload == value
    assert event.payload["nul"] == "bad\\u0000byte"
    assert Run.objects.get(pk=run.pk).goal == "goal\\u0000end"
