"""The simulated outside world: fault flags belong to the run that asked for them,
call logs stay bounded, and ``sim status`` / ``sim reset`` show and restore it."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from runs.engine.errors import StepError
from runs.sim import devices, faults


@pytest.fixture(autouse=True)
def device_dir(settings, tmp_path):
    settings.AGENTOPS_DEVICE_DIR = tmp_path / "devices"
    return settings.AGENTOPS_DEVICE_DIR


def test_it_makes_the_lamp_unreadable_only_for_the_run_that_asked():
    devices.set_lamp_brightness(70, run_id="run-a", unreadable_after=True)
    with pytest.raises(StepError) as caught:
        devices.get_lamp_brightness(run_id="run-a")
    assert caught.value.code == "DEPENDENCY_UNAVAILABLE"
    assert devices.get_lamp_brightness(run_id="run-b") == {"brightness": 70}
    devices.set_lamp_brightness(60, run_id="run-b")
    assert devices.get_lamp_brightness(run_id="run-c") == {"brightness": 60}


def test_it_keeps_the_newest_calls_only(settings):
    settings.AGENTOPS_SIM_CALL_LOG_MAX = 10
    for i in range(25):
        devices.get_lamp_brightness(run_id=f"run-{i}")
    calls = devices.lamp.snapshot()["calls"]
    assert len(calls) == 10
    assert [c["run_id"] for c in calls] == [f"run-{i}" for i in range(15, 25)]


def test_sim_reset_restores_every_device_and_disarms_faults():
    devices.set_lamp_brightness(0, run_id="run-a", unreadable_after=True)
    devices.read_thermostat("kitchen", run_id="run-a")
    faults.arm("thermostat.read", "fail", shots=-1)
    out = StringIO()
    call_command("sim", "reset", stdout=out)
    assert "reset 9 simulated devices" in out.getvalue()
    assert devices.get_lamp_brightness(run_id="run-a") == {"brightness": 80}
    assert devices.read_thermostat("kitchen", run_id="run-b")["celsius"] == 23.5

    out = StringIO()
    call_command("sim", "status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert status["lamp"]["state"] == {"brightness": 80}
    assert status["lamp"]["by_op"] == {"lamp.get_brightness": 1}
    assert status["thermostat"]["calls"] == 1
    assert status["faults"] == {}


def test_sim_status_names_armed_faults_and_call_counts():
    devices.set_lamp_brightness(70, run_id="run-a")
    faults.arm("payments.charge", "delay", seconds=1)
    out = StringIO()
    call_command("sim", "status", stdout=out)
    text = out.getvalue()
    assert 'lamp            1 calls  state {"brightness": 70}' in text
    assert "armed faults: payments.charge x1" in text
