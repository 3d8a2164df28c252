"""The takeover desk names a run's entry points in run order, as the resume page does
(``resumable_names``): when the takeover opens and on the card, whatever order the
takeover's stored list has."""

import re

import pytest
from django.urls import reverse

from runs.engine.control.rewind import resumable_names
from runs.models import Takeover
from tests.support.in_process import *  # noqa: F403 - fixtures
from tests.support.in_process import run_worker_in_process, start_room_temperature

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_desk_shows_checkpoints_in_run_order(clients):
    run = start_room_temperature("T-order", budget={"model_calls": 1})
    run_worker_in_process()
    run.refresh_from_db()
    assert run.status == "PAUSED"
    takeover = Takeover.objects.get(run=run, status="OPEN")
    in_run_order = resumable_names(run)
    assert in_run_order[0] == "start" and len(in_run_order) >= 3
    assert takeover.checkpoints == in_run_order

    # A takeover stored in another order (an older row) is shown in run order all the same.
    Takeover.objects.filter(pk=takeover.pk).update(checkpoints=list(reversed(in_run_order)))
    page = clients["bob"].get(reverse("console:takeovers")).content.decode()
    select = re.search(rf'id="t{takeover.pk}-resume-checkpoint">(.*?)</select>', page, re.S)
    assert select is not None
    options = re.findall(r'<option value="([^"]+)">', select.group(1))
    assert options == in_run_order
    entry_points = re.search(r"<dt>Entry points</dt><dd>(.*?)</dd>", page, re.S).group(1)
    assert re.findall(r"<code>([^<]+)</code>", entry_points) == in_run_order
