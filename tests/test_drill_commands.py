"""``bench``, ``soak`` and ``drill`` as a user runs them: every numeric option takes its
documented range (0 skips a part), and SIGTERM or Ctrl-C stops and reaps every process
the command started."""

import os
import signal
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

pytestmark = pytest.mark.services

SMALL_BENCH = (
    "bench",
    "--steps",
    "10",
    "--workers",
    "1",
    "--console-runs",
    "0",
    "--agent-runs",
    "0",
    "--branch-items",
    "0",
)


def _children(pid: int) -> set[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_it_skips_the_parts_an_option_of_0_turns_off(deployment_factory):
    d = deployment_factory("postgres")
    proc = d.manage(*SMALL_BENCH, "--kills", "0", "--stops", "0", "--pg-seconds", "0", timeout=280)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "--console-runs 0" in out and "--kills 0" in out and "--pg-seconds 0" in out
    assert "--stops 0" in out and "--agent-runs 0" in out and "--branch-items 0" in out
    assert "steps/s (10 no-op steps, 1 workers)" in out


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("bench", "--kills", "-1"), "--kills"),
        (("bench", "--pg-seconds", "nan"), "--pg-seconds"),
        (("soak", "--runs", "1", "--workers", "1", "--duration", "-1"), "--duration"),
    ],
)
def test_it_refuses_a_value_outside_the_range(deployment_factory, argv, flag):
    d = deployment_factory("postgres")
    proc = d.manage(*argv)
    assert proc.returncode != 0 and flag in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("argv", "signum"),
    [
        (("bench", "--steps", "4000", "--workers", "2"), signal.SIGTERM),
        (
            ("soak", "--runs", "8", "--workers", "2", "--duration", "60", "--seed", "7"),
            signal.SIGINT,
        ),
        (("drill", "kill_after_tool"), signal.SIGTERM),
    ],
    ids=["bench-sigterm", "soak-ctrl-c", "drill-sigterm"],
)
def test_it_reaps_every_process_it_started_when_stopped(deployment_factory, argv, signum):
    d = deployment_factory("postgres")
    proc = d.popen(*argv)

    def started_workers() -> set[int]:
        assert proc.poll() is None, d.logs(proc)
        return {pid for pid in _children(proc.pid) if b"worker" in _cmdline(pid)}

    workers = wait_until(started_workers, what="its worker processes", procs=[proc])
    os.kill(proc.pid, signum)
    assert proc.wait(timeout=60) == 128 + signum, d.logs(proc)
    assert not [pid for pid in workers if _alive(pid)]
    assert "every process it started is stopped" in d.logs(proc)[1]
