"""The simulated outside world: fault flags belong to the run that asked for them,
call logs stay bounded, and ``sim status`` / ``sim reset`` show and restore it."""

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

import lab.sim
from agentops.authoring import StepError
from lab.sim import devices, faults
from lab.sim.shop import issue_refund, lookup_order, refunds_for


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
    assert f"reset {len(devices.registered_devices())} simulated devices" in out.getvalue()
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


def _device_stores_defined_in_the_simulator() -> dict[str, devices.DeviceStore]:
    """Every ``DeviceStore`` a module of ``lab.sim`` defines, found by looking, not listed."""
    found = {}
    for info in pkgutil.iter_modules(lab.sim.__path__):
        module = importlib.import_module(f"lab.sim.{info.name}")
        for value in vars(module).values():
            if isinstance(value, devices.DeviceStore):
                found[value.name] = value
    return found


def test_sim_reset_and_status_cover_every_device_the_simulator_defines(settings):
    defined = _device_stores_defined_in_the_simulator()
    assert "shop" in defined
    assert {d.name for d in devices.registered_devices()} == set(defined)
    issue_refund("A1001", "42.00", run_id="run-a")
    assert lookup_order("A1001")["refunded"] == "42.00"

    # A fresh process, as a reader runs it: nothing has imported the shop there.
    done = subprocess.run(
        [sys.executable, "manage.py", "sim", "reset"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "AGENTOPS_DEVICE_DIR": str(settings.AGENTOPS_DEVICE_DIR)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"reset {len(defined)} simulated devices" in done.stdout
    assert set(done.stdout.rsplit(": ", 1)[1].strip().split(", ")) == set(defined)
    assert refunds_for("A1001") == []
    assert lookup_order("A1001", run_id="run-b")["refunded"] == "0"

    out = StringIO()
    call_command("sim", "status", "--json", stdout=out)
    status = json.loads(out.getvalue())
    assert set(status) - {"faults"} == set(defined)
    assert status["shop"]["by_op"] == {"shop.lookup_order": 1}
    out = StringIO()
    call_command("sim", "status", stdout=out)
    listed = [line.split()[0] for line in out.getvalue().splitlines() if line.startswith("  ")]
    assert sorted(listed) == sorted(defined)


@pytest.mark.parametrize(
    "text",
    [
        '{"applied": [{"key": "k1"}]}',  # another layout: no state, no calls
        '{"state": [], "calls": [{"op": "payments.charge"}, 7]}',  # calls without run_id
        "[1, 2]",
        "not json",
    ],
)
def test_a_device_file_the_simulator_did_not_write_reads_as_the_initial_state(device_dir, text):
    """A ``payments.json`` of another shape in the device directory: ``runs status``'s
    device calls, ``sim status`` and the next charge read it without a ``KeyError``."""
    from lab.sim import services

    device_dir.mkdir(parents=True, exist_ok=True)
    (device_dir / "payments.json").write_text(text, encoding="utf-8")
    assert devices.device_calls("run-a") == {}
    status = devices.world_status()
    assert status["payments"]["calls"] == 0 and status["payments"]["state"]["applied"] == []
    assert services.charge({"amount": 5}, run_id="run-a", key="k")["replayed"] is False
    assert devices.device_calls("run-a") == {"payments.charge": 1}
    assert services.payments.initial_state == {"applied": []}
