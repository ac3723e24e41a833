"""A user's `environment_variables` reach only the trial (review of issue 31, finding 1): the
sandbox's root stage (unshare, its shell, mount, mkdir, setpriv, prlimit...) ran with the
trial's environment, so `PATH=bin:/usr/bin:/bin` with an executable `bin/mount` in the context
ran the user's file as uid 0 on a root agent (and, on a non-root agent, before the master's
state was hidden), and `LD_PRELOAD=./evil.so` loaded the user's library into every root binary.
Now the root stage runs with a fixed environment and the trial's is applied at its exec."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dettui.agent import sandbox
from tests.conftest import Served, marked_processes
from tests.e2e.test_single import write_ctx
from tests.e2e.test_trial_users import unix_users  # noqa: F401 - a fixture
from tests.poll import until

pytestmark = [pytest.mark.slow, pytest.mark.both_ways]  # trials forked and fresh (conftest)
ROOT = os.geteuid() == 0
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# What the sandbox and the agent's helpers run before the trial, and what a shell might
SHADOWED = ("mount", "umount", "mkdir", "mktemp", "rmdir", "ln", "readlink", "setpriv",
            "prlimit", "env", "sh", "dash", "bash", "unshare", "true", "cat", "id")

# The trial: marks that it started (so what the shadowed tools write later is its own doing),
# says what it sees, and waits for the test to look at its sandbox before it ends.
TRIAL = """
import os, sys, time
marks = os.environ["MARKS"]
with open(marks + "/marks", "a") as f:
    f.write(f"TRIAL {os.getuid()}\\n")
print("READY", os.getuid(), "PATH=" + os.environ.get("PATH", ""),
      "LD_PRELOAD=" + os.environ.get("LD_PRELOAD", "-"),
      "sandbox vars", sorted(k for k in os.environ if k.startswith("DETTUI_SANDBOX")),
      flush=True)
deadline = time.time() + 300
while not os.path.exists(marks + "/release") and time.time() < deadline:
    time.sleep(0.1)
"""

# A library that says, from every process that loads it, who it is.
EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char comm[64] = "?\n";
    FILE *c = fopen("/proc/self/comm", "r");
    if (c) { if (!fgets(comm, sizeof comm, c)) comm[0] = '?'; fclose(c); }
    FILE *f = fopen(MARKS "/marks", "a");
    if (f) { fprintf(f, "%d %s", (int)getuid(), comm); fclose(f); }
}
"""


@pytest.fixture
def marks() -> Iterator[Path]:
    """A directory every user may write (the trial's user, the tools run as root)."""
    d = Path(tempfile.mkdtemp(prefix="dettui-marks-", dir="/tmp"))
    d.chmod(0o777)  # not sticky: fs.protected_regular would refuse appends to others' files
    (d / "marks").write_text("")
    (d / "marks").chmod(0o666)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _shadowing_context(tmp_path: Path, marks: Path, secret: Path, extra_env: str = "") -> Path:
    """An experiment whose context holds bin/<tool> for each tool the sandbox runs: each writes
    its uid, its name and whether it could read `secret` to marks/marks, then runs the real
    tool; its config puts bin first on PATH."""
    cfg, ctx = write_ctx(tmp_path, f"""
        name: shadow
        entrypoint: [python3, trial.py]  # no `sh -c`: the trial's own sh would run bin/sh
        searcher: {{name: single, metric: x, max_length: 1}}
        environment:
          environment_variables: [PATH=bin:/usr/bin:/bin, MARKS={marks}, FROM_USER=yes
                                  {extra_env}]
        """, {"trial.py": TRIAL})
    (ctx / "bin").mkdir()
    for name in SHADOWED:
        real = shutil.which(name, path=SYSTEM_PATH)
        if real is None:
            continue
        tool = ctx / "bin" / name
        tool.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            if /bin/cat {secret} >/dev/null 2>&1; then r=read-secret; else r=-; fi
            echo "$(/usr/bin/id -u) {name} $r" >> {marks}/marks
            exec {real} "$@"
            """))
        tool.chmod(0o755)
    return cfg


def _run_until_ready(served: Served, cfg: Path, ctx: Path) -> str:
    served.cli("e", "create", str(cfg), str(ctx))
    return until(lambda: served.cli("t", "logs", "1", check=False).stdout, "the trial's start",
                 timeout=120, done=lambda out: "READY" in out or "exited with code" in out)


def _finish(served: Served, marks: Path) -> None:
    (marks / "release").write_text("")
    exp = served.wait_experiment(1, timeout=120)
    assert exp["state"] == "STATE_COMPLETED", served.cli("t", "logs", "1").stdout


def _marks(marks: Path) -> list[str]:
    return (marks / "marks").read_text().splitlines()


def _root_stage_environments() -> list[dict[str, str]]:
    """The environments of this test run's sandbox processes that stay while the trial runs
    (`unshare`, whose command line names the sandbox)."""
    out = []
    for pid in marked_processes():
        try:
            proc = psutil.Process(pid)
            if "dettui-sandbox" in proc.cmdline():
                out.append(proc.environ())
        except psutil.Error:
            continue
    return out


@pytest.fixture(params=["namespaces", "fallback"])
def either(request: pytest.FixtureRequest, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A master whose agent runs trials in namespaces, or without (no `unshare` on its PATH,
    and --no-sandbox: a root agent still runs setpriv before the trial, where nothing of a
    user's may run; its trials run as root, as others could not reach the 0700 state dir
    that holds their work dirs)."""
    if request.param == "namespaces" and not sandbox.probe().on:
        pytest.skip(sandbox.probe().note or "no namespaces")
    if request.param == "fallback":
        bare = tmp_path / "agent-bin"
        bare.mkdir()
        for name in ("setpriv", "prlimit", "true", "sh"):
            if (real := shutil.which(name)) is not None:
                (bare / name).symlink_to(real)
        monkeypatch.setenv("PATH", str(bare))
        monkeypatch.setenv(sandbox.OFF_SWITCH, "1")
    trial_user = ["--trial-user", "root"] if request.param == "fallback" and ROOT else []
    s = Served(tmp_path / "state", tmp_path / "config", extra=["--agent-slots", "1", *trial_user])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def test_a_users_path_runs_none_of_their_files_before_the_trial(
        either: Served, tmp_path: Path, marks: Path) -> None:
    served = either
    secret = served.state_dir.resolve() / "secret.key"
    cfg = _shadowing_context(tmp_path, marks, secret)
    out = _run_until_ready(served, cfg, tmp_path / "ctx")
    assert "READY" in out, out
    assert "PATH=bin:/usr/bin:/bin " in out, out  # the trial has its PATH, as given
    assert "sandbox vars []" in out, out
    seen = _marks(marks)
    assert seen and seen[0].startswith("TRIAL "), (  # nothing of the context ran before it
        f"the context's tools ran before the trial: {seen}")
    assert not any(line.startswith("0 ") or "read-secret" in line for line in seen
                   if not line.startswith("TRIAL ")), seen
    if "agent-bin" not in os.environ["PATH"]:  # in namespaces
        stages = _root_stage_environments()
        assert stages, "no sandbox process found while the trial runs"
        for env in stages:
            assert env.get("PATH") == SYSTEM_PATH, env
            assert "FROM_USER" not in env and "MARKS" not in env, env
    _finish(served, marks)


def test_a_users_ld_preload_is_loaded_by_the_trial_only(
        served: Served, tmp_path: Path, marks: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded library (install gcc)")
    cfg, ctx = write_ctx(tmp_path, f"""
        name: preload
        entrypoint: python3 trial.py
        searcher: {{name: single, metric: x, max_length: 1}}
        environment:
          environment_variables: [LD_PRELOAD=./evil.so, MARKS={marks}]
        """, {"trial.py": TRIAL})
    (tmp_path / "evil.c").write_text(EVIL_C)
    subprocess.run([cc, "-shared", "-fPIC", f'-DMARKS="{marks}"', "-o", str(ctx / "evil.so"),
                    str(tmp_path / "evil.c")], check=True, capture_output=True)
    out = _run_until_ready(served, cfg, ctx)
    assert "READY" in out and "LD_PRELOAD=./evil.so" in out, out  # the trial keeps it
    seen = _marks(marks)
    trial_uid = int(out.split("READY ", 1)[1].split()[0])
    loaded = [line for line in seen if not line.startswith("TRIAL ")]
    assert loaded and all(int(line.split()[0]) == trial_uid for line in loaded), seen
    if ROOT:  # the trial runs as another user: nothing loaded the library as root
        assert trial_uid != 0 and not any(line.startswith("0 ") for line in seen), seen
    for env in _root_stage_environments():
        assert "LD_PRELOAD" not in env, env
    _finish(served, marks)
    setup = {"unshare", "mount", "umount", "mkdir", "mktemp", "rmdir", "setpriv", "prlimit"}
    assert not any(line.split()[-1] in setup for line in _marks(marks)), _marks(marks)


def test_a_non_root_master_runs_none_of_a_users_files_before_hiding_its_state(
        tmp_path: Path, marks: Path, unix_users: list[pwd.struct_passwd]) -> None:  # noqa: F811
    """The master run by an ordinary user: its sandbox's setup (root in a user namespace, the
    state dir not yet covered) ran the context's bin/mount, which could copy secret.key."""
    user = unix_users[0]
    probe = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                            "--clear-groups", os.sys.executable, "-c",  # type: ignore[attr-defined]
                            "from dettui.agent import sandbox; print(sandbox.probe())"],
                           capture_output=True, text=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"user {user.pw_name} cannot run this checkout's Python (it is not "
                    f"readable by other users): {probe.stderr.strip()[-200:]}")
    home = Path(tempfile.mkdtemp(prefix="dettui-nonroot-"))
    try:
        os.chown(home, user.pw_uid, user.pw_gid)
        served = Served(home / "state", home / "config",
                        prefix=["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                                "--clear-groups", "env", f"HOME={home}"])
        served.start()
        try:
            cfg = _shadowing_context(home, marks, served.state_dir / "secret.key")
            out = _run_until_ready(served, cfg, home / "ctx")
            assert "READY" in out, out
            seen = _marks(marks)
            assert seen and seen[0].startswith("TRIAL "), (
                f"the context's tools ran before the trial: {seen}")
            assert not any("read-secret" in line for line in seen), seen
            _finish(served, marks)
        finally:
            served.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.skipif(not ROOT, reason="trials change user only on a root agent (this test run "
                    "is not root)")
def test_an_entrypoint_on_a_relative_path_entry_runs_sandboxed(served: Served,
                                                               tmp_path: Path) -> None:
    """`entrypoint: [mytool]` found only through the PATH entry `bin` (relative: the work dir)
    was not found by the agent's check, which looked from its own directory, so it was started
    without the sandbox: as root, with every capability."""
    cfg, ctx = write_ctx(tmp_path, """
        name: relative
        entrypoint: [mytool]
        searcher: {name: single, metric: x, max_length: 1}
        environment: {environment_variables: [PATH=bin:/usr/bin:/bin]}
        """, {})
    (ctx / "bin").mkdir()
    tool = ctx / "bin" / "mytool"
    tool.write_text("#!/bin/sh\necho MYTOOL uid=$(/usr/bin/id -u) "
                    "$(/bin/grep NoNewPrivs /proc/self/status | /usr/bin/tr -d ' \\t')\n")
    tool.chmod(0o755)
    out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120,
                     check=False).stdout
    assert "MYTOOL uid=" in out, out
    assert "MYTOOL uid=0 " not in out and "NoNewPrivs:1" in out, out
