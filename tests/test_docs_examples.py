"""Every page's shell examples run, in order, as a newcomer would run them.

The pages are README.md, then the docs/ pages in the order README links them, then any
other docs/*.md (so a new page is walked without editing this test). From each page,
every fenced block whose info string is ``sh`` is run; other fences (````text``,
````python``, ````ini``, plain ``````) are illustrations and are not. A block is skipped
when the line before its fence is ``<!-- docs-test: skip: REASON -->`` (the reason is
required and shown by pytest), and a single line is left out when it ends with
``# docs-test: skip`` (a server that runs until Ctrl-C). A fenced block of any kind
whose line before is ``<!-- docs-file: PATH -->`` is a file the reader saves: it is
written to PATH (relative to the repository; ``../DIR/...`` is a project of the reader's
own beside the checkout, outside the repository) when the walk reaches it. On the pages of
``PASTABLE``, every ``python`` block is also run as pasted into a module of its own (in
one Django process) and checked for names it uses without defining them.

Each page starts on a fresh copy of the repository's tracked files (its own ``var/``,
the SQLite default, no DATABASE_URL or REDIS_URL, offline) with ``.venv`` linked to
this interpreter's virtualenv, in bash with ``set -euo pipefail``; a page's blocks share
one shell state (variables, exports, working directory) as a reader's terminal would.
A block passes when it exits 0 and prints no traceback; a page passes when its blocks
do and it leaves no run PENDING, RUNNING or CANCEL_REQUESTED (a reader walking the
pages in one clone would see the next page's first worker run them). Processes a block leaves in the
background (``manage.py serve ... &``) are stopped when the page ends: each block runs
in a session of its own, which is signalled as a whole. The one change to what is
written: port 8000 becomes a free port. Leases keep their default length, as a reader's
do: a dead worker's step is handed back by liveness, not by waiting a lease out, and a
short lease would be lost by a worker starved for a second or two on a loaded machine.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parent.parent
SKIP_BLOCK = re.compile(r"<!--\s*docs-test:\s*skip:\s*(?P<reason>.+?)\s*-->")
SKIP_LINE = "# docs-test: skip"
DOCS_FILE = re.compile(r"<!--\s*docs-file:\s*(?P<path>[\w./-]+?)\s*-->")
BLOCK_TIMEOUT = 600  # seconds; generous for a loaded machine, not a timing assertion
#: Seconds a page's servers get to stop on SIGTERM before the SIGKILL (a bound, not a
#: timing assertion: they stop within a second or two).
STOP_GRACE = 10


@dataclass
class Block:
    page: str
    line: int
    code: str
    skip: str = ""
    #: Where a file block is written (relative to the repository); "" for a command block.
    path: str = ""


def pages() -> list[str]:
    """README.md, the docs pages in README's link order, then the other docs pages."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = list(dict.fromkeys(re.findall(r"\]\((docs/[\w.-]+\.md)\)", readme)))
    others = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "docs").glob("*.md")
        if str(p.relative_to(REPO)) not in linked
    )
    return ["README.md", *[p for p in linked if (REPO / p).exists()], *others]


def blocks(page: str) -> list[Block]:
    """The ``sh`` blocks and the file blocks of ``page`` in order, with their skip
    reasons."""
    lines = (REPO / page).read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        if lines[i].startswith("```") and (target := DOCS_FILE.search(before)):
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            found.append(Block(page, start + 1, "\n".join(body) + "\n", path=target["path"]))
        elif lines[i].strip() == "```sh":
            start = i
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                if not lines[i].rstrip().endswith(SKIP_LINE):
                    body.append(lines[i])
                i += 1
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            marker = SKIP_BLOCK.search(before)
            found.append(
                Block(page, start + 1, "\n".join(body), marker.group("reason") if marker else "")
            )
        i += 1
    return found


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository's tracked files in a fresh directory, ``.venv`` linked; its parent
    directory is the clone's own, for the reader's projects beside it."""
    root = tmp_path_factory.mktemp("clone") / "agentops"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / name.decode()
        if source.is_file():
            target = root / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (root / ".venv").symlink_to(Path(sys.prefix))
    return root


def _env(var: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTOPS_", "DJANGO_"))}
    for name in ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    env.update(
        PATH=f"{Path(sys.prefix) / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}",
        AGENTOPS_VAR_DIR=str(var),
        PYTHONUNBUFFERED="1",
    )
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_sessions(sessions: list[int]) -> None:
    """SIGTERM, then SIGKILL, whatever is left of the sessions the page's blocks ran in
    (each block's bash led its own session, so its background children are in it). A
    server gets up to ``STOP_GRACE`` seconds to shut down cleanly before the SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for sid in sessions:
            try:
                os.killpg(sid, sig)
            except ProcessLookupError:
                continue
        if sig == signal.SIGTERM:
            # Past the grace the SIGKILL below ends what is left: no failure.
            with contextlib.suppress(AssertionError):
                wait_until(
                    lambda: not any(_session_alive(sid) for sid in sessions),
                    what="the page's processes to stop",
                    timeout=STOP_GRACE,
                    interval=0.1,
                )


def _session_alive(sid: int) -> bool:
    """Whether a process of session ``sid`` still runs, read from ``/proc`` (Linux): a
    zombie that no one reaped yet counts as stopped."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses.
            state, _ppid, _pgrp, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we read
        if int(session) == sid and state != "Z":
            return True
    return False


def pages_with_examples() -> list[str]:
    """The pages (in ``pages()`` order) with at least one ``sh`` block to run; a page of
    prose and illustrations only has nothing to walk."""
    return [p for p in pages() if any(not b.skip for b in blocks(p))]


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", pages_with_examples())
def test_every_example_of_the_page_runs(page, clone, tmp_path):
    todo = blocks(page)
    var = tmp_path / "var"
    # The clone's var/ is this page's own data directory, as a reader's var/ is the
    # default one: a command naming "var/..." finds it.
    var.mkdir()
    link = clone / "var"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(var)
    state = tmp_path / "shell-state.sh"
    state.write_text(f"cd {clone}\n", encoding="utf-8")
    env = _env(var)
    port = str(_free_port())
    sessions: list[int] = []
    try:
        for block in todo:
            if block.path:
                _write_file(block, clone)
            elif not block.skip:
                _run_block(block, clone, env, state, port, sessions)
    finally:
        _stop_sessions(sessions)
    assert _runnable_runs(var, env, state) == [], f"{page} leaves runs for the next page"


def _runnable_runs(var: Path, env: dict, state: Path) -> list[str]:
    """The runs a page leaves PENDING, RUNNING or CANCEL_REQUESTED, listed in the page's
    own shell state: a reader's next ``worker --burst`` (on the next page) would run
    them, against that page's comments. A page that made no database leaves none."""
    if not (var / "agentops.sqlite3").exists():
        return []
    listed = subprocess.run(
        ["bash", "-c", f". {state}\npython manage.py runs list --json --limit 500 "
         "--status PENDING --status RUNNING --status CANCEL_REQUESTED"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = json.loads(listed.stdout)["runs"]
    return [f"{r['workflow']} {r['run_id']} {r['status']}" for r in rows]


def _write_file(block: Block, clone: Path) -> None:
    """Save a file block where the page says: inside the clone, or beside it in the
    clone's own parent directory (a project of the reader's own)."""
    target = (clone / block.path).resolve()
    assert target.is_relative_to(clone.parent.resolve()), f"{block.page}:{block.line} {block.path}"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.code, encoding="utf-8")


def _run_block(block: Block, clone: Path, env: dict, state: Path, port: str, sessions: list):
    code = re.sub(r"(127\.0\.0\.1:|--port )8000\b", rf"\g<1>{port}", block.code)
    script = (
        "set -euo pipefail\n"
        f". {state}\n"
        f"{code}\n"
        # The shell state a reader's terminal would keep: exports, plain variables
        # (RUN_ID=...) and the working directory.
        f"{{ export -p; declare -p | grep -E '^declare -- [A-Z_]+=' || true; "
        f'echo "cd $PWD"; }} > {state}.new\n'
        f"mv {state}.new {state}\n"
    )
    # Files, not pipes: a server the block leaves in the background keeps a pipe open.
    out_path, err_path = state.with_suffix(".stdout"), state.with_suffix(".stderr")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            env=env,
            cwd=clone,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    sessions.append(proc.pid)
    try:
        proc.wait(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    where = (
        f"{block.page}:{block.line}\n{block.code}\n--- stdout\n{stdout[-4000:]}"
        f"\n--- stderr\n{stderr[-4000:]}"
    )
    assert proc.returncode == 0, where
    assert "Traceback" not in stderr + stdout, where


def test_skipped_blocks_say_why():
    for page in pages():
        for block in blocks(page):
            if block.skip:
                assert len(block.skip) > 10, f"{page}:{block.line}: give a reason"


#: Pages whose every ``python`` block runs as pasted into a module of the reader's own.
PASTABLE = ("docs/parallel.md",)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("page", PASTABLE)
def test_every_python_block_of_the_page_runs_as_pasted(page, tmp_path):
    text = (REPO / page).read_text(encoding="utf-8")
    found = [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]
    assert found, f"{page} has no python block"
    # Each block in a fresh namespace of one Django process, as a module of its own.
    code = (
        "import json, sys, django; django.setup()\n"
        "failed = {}\n"
        "for line, source in json.load(sys.stdin):\n"
        "    try:\n"
        "        where = f'" + page + ":{line}'\n"
        "        exec(compile(source, where, 'exec'), {'__name__': f'block{line}'})\n"
        "    except Exception as exc:\n"
        "        failed[line] = f'{type(exc).__name__}: {exc}'\n"
        "print(json.dumps(failed))\n"
    )  # fmt: skip
    env = {**_env(tmp_path), "DJANGO_SETTINGS_MODULE": "agentops.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        input=json.dumps(found),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {}
    # A name only a function's body uses fails when the run executes it, not on import.
    for line, source in found:
        (tmp_path / f"block_{line}.py").write_text(source, encoding="utf-8")
    undefined = subprocess.run(
        [Path(sys.executable).parent / "ruff", "check", "--isolated", "--select", "F821",
         "--output-format", "concise", "."],
        cwd=tmp_path, capture_output=True, text=True, timeout=BLOCK_TIMEOUT,
    )  # fmt: skip
    assert undefined.returncode == 0, undefined.stdout
