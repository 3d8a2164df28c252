"""The ``partition`` drill: one worker cut off from Redis, then from PostgreSQL, by a
network partition (packets dropped, no reset), beside a healthy worker.

``Partition`` puts a worker in a network namespace of its own, joined to this host by
a veth pair on loopback-range addresses (``127.X.Y.1`` on the host side, ``127.X.Y.2``
in the namespace; ``route_localnet`` lets those cross the link), and cuts it from chosen
TCP ports of the host address with nftables (or iptables) DROP rules inside the
namespace: packets vanish both ways, as in a real partition. The drill's own PostgreSQL
(``PgCluster``, with the server link settings docs/deploy.md gives) and redis-server
listen on loopback and on the host side of the link. Only root can do this, with
``ip`` and ``nft`` or ``iptables``; otherwise the drill is skipped with the reason.
"""

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from lab.drills.base import DrillSkipped, drill, events, owner_pid, running_or_exit, steps
from lab.drills.base import wait_terminal as _wait_terminal
from lab.drills.catalog import DRILL_ENV, _start_room
from lab.drills.sandbox import PgCluster, Sandbox, SandboxError, db_url, wait_until
from lab.pg_bootstrap import free_port
from lab.sim import faults, services
from lab.sim.devices import device_calls
from runs.engine.control.lifecycle import start_run
from runs.engine.execution.liveness import LOCK_NAMESPACE
from runs.models import Operation, Run, Step, WorkerProcess
from runs.states import RunStatus, StepStatus

#: PostgreSQL server settings under which the server ends a cut-off client's session
#: (and with it the client's advisory locks) within about 10 s; docs/deploy.md gives
#: the same values. Keepalive probes start after 5 s of silence, one a second, three
#: unanswered end the session; data the client leaves unacknowledged for 10 s ends it
#: too; a running query notices a vanished client every 2 s.
SERVER_LINK_SETTINGS = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "1",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "10s",
    "client_connection_check_interval": "2s",
}

#: Name of the nftables table the cut lives in (inside the namespace only).
NFT_TABLE = "agentops_partition"


def partition_unavailable() -> str | None:
    """Why this machine cannot run the drill (not root, no ``ip``, neither ``nft``
    nor ``iptables``), or ``None`` when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and packet filter rules)"
    if not shutil.which("ip"):
        return "needs the ip command (Debian package iproute2)"
    if not (shutil.which("nft") or shutil.which("iptables")):
        return "needs nft (package nftables) or iptables"
    return None


def _sh(*argv: str, stdin: str | None = None) -> None:
    proc = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if proc.returncode:
        raise SandboxError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")


class Partition:
    """A network namespace linked to this host (see the module docstring).

    ``host_addr`` is the host side's address (servers listen there), ``ns_addr`` the
    namespace's; ``prefix`` runs a command inside the namespace; ``cut(ports)`` drops
    every packet between the namespace and those TCP ports of ``host_addr``;
    ``heal()`` lifts the cut. Use as a context manager: the namespace and the link are
    removed on exit. Raises ``SandboxError`` when a command fails.
    """

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.netns = f"agentops-{tag}"
        self.host_if = f"agp{tag}h"
        self.ns_if = f"agp{tag}n"
        net = f"127.{100 + secrets.randbelow(100)}.{1 + secrets.randbelow(250)}"
        self.host_addr = f"{net}.1"
        self.ns_addr = f"{net}.2"
        self.tool = "nft" if shutil.which("nft") else "iptables"
        self.cut_ports: list[int] = []

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]

    def _in_ns(self, *argv: str, stdin: str | None = None) -> None:
        _sh(*self.prefix, *argv, stdin=stdin)

    def __enter__(self) -> "Partition":
        _sh("ip", "netns", "add", self.netns)
        try:
            _sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _sh("ip", "link", "set", self.ns_if, "netns", self.netns)
            # 127/8 is local on the host: the namespace's address must route over the
            # link (a more specific route in the local table), and both ends must
            # accept loopback-range addresses on a non-loopback device.
            _sh("sysctl", "-qw", f"net.ipv4.conf.{self.host_if}.route_localnet=1")
            _sh("ip", "addr", "add", f"{self.host_addr}/32", "dev", self.host_if)
            _sh("ip", "link", "set", self.host_if, "up")
            _sh(
                "ip", "route", "add", "table", "local", f"{self.ns_addr}/32",
                "dev", self.host_if, "src", self.host_addr,
            )  # fmt: skip
            self._in_ns("ip", "link", "set", "lo", "up")
            self._in_ns("sysctl", "-qw", f"net.ipv4.conf.{self.ns_if}.route_localnet=1")
            self._in_ns("ip", "addr", "add", f"{self.ns_addr}/32", "dev", self.ns_if)
            self._in_ns("ip", "link", "set", self.ns_if, "up")
            self._in_ns(
                "ip", "route", "add", f"{self.host_addr}/32", "dev", self.ns_if,
                "src", self.ns_addr,
            )  # fmt: skip
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the namespace and the link (the host-side route goes with it)."""
        with contextlib.suppress(SandboxError):
            _sh("ip", "netns", "del", self.netns)
        with contextlib.suppress(SandboxError):
            _sh("ip", "link", "del", self.host_if)

    def cut(self, ports: list[int]) -> None:
        """Drop every packet from the namespace to ``ports`` of ``host_addr`` and back."""
        self.cut_ports = list(ports)
        if self.tool == "nft":
            port_set = ", ".join(str(p) for p in ports)
            self._in_ns(
                "nft",
                "-f",
                "-",
                stdin=(
                    f"table inet {NFT_TABLE} {{\n"
                    "  chain out { type filter hook output priority 0; policy accept;\n"
                    f"    ip daddr {self.host_addr} tcp dport {{ {port_set} }} drop; }}\n"
                    "  chain in { type filter hook input priority 0; policy accept;\n"
                    f"    ip saddr {self.host_addr} tcp sport {{ {port_set} }} drop; }}\n"
                    "}\n"
                ),
            )
            return
        for port in ports:
            self._in_ns(
                "iptables", "-w", "-A", "OUTPUT", "-d", self.host_addr, "-p", "tcp",
                "--dport", str(port), "-j", "DROP",
            )  # fmt: skip
            self._in_ns(
                "iptables", "-w", "-A", "INPUT", "-s", self.host_addr, "-p", "tcp",
                "--sport", str(port), "-j", "DROP",
            )  # fmt: skip

    def heal(self) -> None:
        """Lift the cut: packets flow again."""
        if self.tool == "nft":
            self._in_ns("nft", "delete", "table", "inet", NFT_TABLE)
        else:
            self._in_ns("iptables", "-w", "-F", "OUTPUT")
            self._in_ns("iptables", "-w", "-F", "INPUT")
        self.cut_ports = []


class RedisServer:
    """A redis-server of the drill's own (no persistence) on loopback and ``extra``."""

    def __init__(self, root: Path, extra: str):
        binary = os.environ.get("AGENTOPS_REDIS_BIN") or shutil.which("redis-server")
        if not binary:
            raise DrillSkipped("needs redis-server (AGENTOPS_REDIS_BIN or PATH)")
        self.port = free_port()
        self.log = root / "redis.log"
        argv = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1", extra,
            # Bound to loopback-range addresses only; the namespace's is one of them.
            "--protected-mode", "no",
            "--save", "", "--appendonly", "no", "--dir", str(root),
            "--logfile", str(self.log),
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        import redis

        client = redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)
        try:
            if not wait_until(lambda: self._answers(client), 30):
                self.stop()
                raise SandboxError(f"redis-server did not start; see {self.log}")
        finally:
            client.close()

    @staticmethod
    def _answers(client) -> bool:
        try:
            return bool(client.ping())
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def url(self, host: str = "127.0.0.1") -> str:
        return f"redis://{host}:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@drill(
    "partition",
    "one worker cut from Redis, then from PostgreSQL, by dropped packets (network "
    "namespace), beside a healthy worker: bounded calls, database fallback, takeover "
    "on the liveness signal, late write fenced",
)
def partition(r):
    reason = partition_unavailable()
    if reason:
        raise DrillSkipped(reason)
    root = Path(tempfile.mkdtemp(prefix="agentops-partition-"))
    cluster = None
    redis_server = None
    try:
        with Partition() as net:
            redis_server = RedisServer(root, net.host_addr)
            cluster = PgCluster(
                listen=("127.0.0.1", net.host_addr),
                conf=SERVER_LINK_SETTINGS,
                clients=(net.ns_addr,),
            ).init()
            redis_cut(r, net, cluster, redis_server, settings.AGENTOPS_PARTITION_REDIS_SECONDS)
            pg_cut(r, net, cluster, redis_server, settings.AGENTOPS_PARTITION_PG_SECONDS)
    finally:
        if cluster is not None:
            cluster.destroy()
        if redis_server is not None:
            redis_server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _cut_worker_env(box: Sandbox, net: Partition, redis_server: RedisServer) -> dict:
    """The environment of the worker in the namespace: both stores at the host side of
    the link."""
    return {
        "DATABASE_URL": db_url({**box.server, "host": net.host_addr}, box.db_name),
        "REDIS_URL": redis_server.url(net.host_addr),
    }


def _worker_pk(proc) -> int | None:
    return WorkerProcess.objects.filter(pid=proc.pid).values_list("pk", flat=True).first()


def redis_cut(r, net: Partition, cluster, redis_server: RedisServer, seconds: float) -> None:
    """The worker runs a step taken from RQ when its link to Redis is cut for
    ``seconds``: the runs created meanwhile finish from the database during the cut, no
    Redis call of the worker waits longer than ``AGENTOPS_REDIS_TIMEOUT``, and RQ
    dispatch is back within seconds of the heal."""
    bound = settings.AGENTOPS_REDIS_TIMEOUT
    env = {**DRILL_ENV, "AGENTOPS_LEASE_SECONDS": "30"}
    with Sandbox("part-redis", env=env, server=cluster.server, redis_url=redis_server.url()) as box:
        first = _start_room("part-redis")
        faults.arm("thermostat.read", "delay", seconds=3.0, run_id=first.pk)
        probe_file = box.root / "cut-worker.json"
        worker = box.start_worker(
            extra_env=_cut_worker_env(box, net, redis_server),
            probe_file=probe_file,
            prefix=net.prefix,
        )
        running = wait_until(
            lambda: Step.objects.filter(
                run_id=first.pk, name="read_temperature", status=StepStatus.RUNNING
            ).exists(),
            90,
            0.05,
        )
        if not running:
            r.check("step taken from RQ and running", "running", box.log(worker)[-1500:], False)
            return
        r.check("step taken from RQ and running", "running", "running", True)
        net.cut([redis_server.port])
        cut_at = time.monotonic()
        during = [_start_room(f"part-redis{i}").pk for i in range(3)]
        statuses = _wait_terminal([first.pk, *during], seconds - 1)
        finished_in = time.monotonic() - cut_at
        succeeded = sum(statuses.get(i) == RunStatus.SUCCEEDED for i in during)
        r.expect(
            "runs created during the cut SUCCEEDED during it (from the database)", 3, succeeded
        )
        r.check(
            f"seconds from the cut until they finished (cut: {seconds:g} s)",
            f"< {seconds:g}",
            round(finished_in, 1) if succeeded == 3 else "not during the cut",
            succeeded == 3 and finished_in < seconds,
        )
        r.expect("run whose step was running at the cut", "SUCCEEDED", statuses.get(first.pk))
        time.sleep(max(0.0, seconds - (time.monotonic() - cut_at)))
        net.heal()
        healed_at = time.monotonic()
        back = wait_until(lambda: "back to RQ dispatch" in box.log(worker), 60, 0.1)
        back_in = time.monotonic() - healed_at
        r.check(
            "seconds from the heal until RQ dispatch is back",
            "<= 10",
            round(back_in, 1) if back else "not back in 60 s",
            bool(back) and back_in <= 10,
        )
        after = _start_room("part-redis-after").pk
        r.expect(
            "run created after the heal",
            "SUCCEEDED",
            _wait_terminal([after], 60).get(after),
        )
        r.expect("cut worker", "alive", running_or_exit(worker))
        box.stop_workers()
        report = json.loads(probe_file.read_text()) if probe_file.exists() else {}
        longest = report.get("redis_max_wait_s")
        r.check(
            f"longest wait of one Redis call, any thread (bound {bound:g} s)",
            f"<= {bound:g} s (+0.5 s scheduling)",
            longest,
            longest is not None and longest <= bound + 0.5,
        )


def _lock_held(worker_pk: int) -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s::oid AND objid = %s::oid AND objsubid = 2",
            [LOCK_NAMESPACE, worker_pk],
        )
        return cur.fetchone()[0] > 0


def _heartbeat(worker_pk: int):
    return WorkerProcess.objects.values_list("heartbeat_at", flat=True).get(pk=worker_pk)


def _late_write(run_id) -> str:
    """How the cut worker's stale attempt 1 ended once it reached the database again:
    its commit, or its giving back of the step, rejected by the attempt fence."""
    for e in events(run_id, ("step.commit_rejected",)):
        if e.payload.get("attempt") == 1:
            during = e.payload.get("during", "commit")
            return f"step.commit_rejected attempt 1 ({during})"
    return ""


def pg_cut(r, net: Partition, cluster, redis_server: RedisServer, seconds: float) -> None:
    """The worker has applied a charge and not yet saved it when its link to
    PostgreSQL is cut for ``seconds`` (the 30 s lease outlasts the takeover): the
    server ends its session, the healthy worker retakes the step on the liveness
    signal, the cut worker works again soon after the heal, its late write is fenced
    and the charge is applied once."""
    env = {**DRILL_ENV, "AGENTOPS_LEASE_SECONDS": "30"}
    with Sandbox("part-pg", env=env, server=cluster.server, redis_url=redis_server.url()) as box:
        run = start_run(
            "synthetic_order",
            thread_id="drill-partition-pg",
            input={"sku": "A-1", "amount": 42},
            actor="drill",
        )
        # The charge is made, then the worker is busy for a while before it saves it:
        # long enough for the healthy worker to start and the cut to come.
        faults.arm("payments.charge", "delay", when="after", seconds=20.0, run_id=run.pk)
        cut_worker = box.start_worker(
            extra_env=_cut_worker_env(box, net, redis_server), prefix=net.prefix
        )
        charged = wait_until(
            lambda: device_calls(str(run.pk)).get("payments.charge") == 1, 90, 0.05
        )
        r.expect(
            "charge requests by the cut worker", 1, device_calls(str(run.pk)).get("payments.charge")
        )
        if not charged:
            return
        healthy = box.start_worker()
        wait_until(lambda: WorkerProcess.objects.filter(liveness="pg").count() == 2, 60)
        cut_pk = _worker_pk(cut_worker)
        if cut_pk is None:
            # Without its row the heal cannot be observed: report that, not a timeout.
            r.check("cut worker registered", "a worker row", "none", False)
            return
        charge = steps(run.pk)["charge"]
        net.cut([int(cluster.server["port"])])
        cut_at = time.monotonic()
        retaken = wait_until(
            lambda: Step.objects.filter(pk=charge.pk, attempt__gte=2).exists(), 60, 0.1
        )
        retaken_in = time.monotonic() - cut_at
        r.check(
            "seconds from the cut until the healthy worker retook the step",
            "<= 15",
            round(retaken_in, 1) if retaken else "not in 60 s",
            bool(retaken) and retaken_in <= 15,
        )
        handed = [e.type for e in events(run.pk, ("lease.owner_dead", "lease.expired"))]
        r.expect("handed over on", ["lease.owner_dead"], handed)
        r.expect(
            "run finished by the healthy worker",
            "SUCCEEDED",
            _wait_terminal([run.pk], 60).get(run.pk),
        )
        time.sleep(max(0.0, seconds - (time.monotonic() - cut_at)))
        beat_at_heal = _heartbeat(cut_pk)
        net.heal()
        healed_at = time.monotonic()
        back = wait_until(
            lambda: _lock_held(cut_pk) and _heartbeat(cut_pk) != beat_at_heal, 60, 0.1
        )
        back_in = time.monotonic() - healed_at
        r.check(
            "seconds from the heal until the cut worker works again (lock and heartbeat)",
            "<= 5",
            round(back_in, 1) if back else "not in 60 s",
            bool(back) and back_in <= 5,
        )
        late = wait_until(lambda: _late_write(run.pk), 60)
        r.check("cut worker's late write fenced", "rejected for attempt 1", late, bool(late))
        charges = [a for a in services.applied_effects() if a["op"] == "charge"]
        r.expect("charges applied by the payments ledger", 1, len(charges))
        op = Operation.objects.get(run_id=run.pk, tool="payments.charge")
        r.expect(
            "ledger key = applied charge key",
            op.idempotency_key,
            charges[0]["key"] if charges else None,
        )
        r.expect(
            "step.succeeded of the charge step (one attempt committed)",
            [2],
            [e.payload.get("attempt") for e in events(run.pk, ("step.succeeded",))
             if e.step_id == charge.pk],
        )  # fmt: skip
        started = [
            owner_pid(e.payload.get("worker") or "")
            for e in events(run.pk, ("step.started",))
            if e.step_id == charge.pk
        ]
        r.expect("charge attempts by (cut, healthy)", [cut_worker.pid, healthy.pid], started)
        r.expect("status after the late write", "SUCCEEDED", Run.objects.get(pk=run.pk).status)
        r.expect("cut worker", "alive", running_or_exit(cut_worker))
        r.expect("healthy worker", "alive", running_or_exit(healthy))
