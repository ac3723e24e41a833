"""Trials run as their owner's Unix user, never as the agent's root (issue 29, attacks 1 and 4):
a root master's trial is an unprivileged user with no capabilities, cannot undo the sandbox's
mounts nor read the master's key and database through them, sees no host process; two users
linked to two Unix users run their trials, and own their checkpoints, as those users."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dettui.agent import sandbox, trialuser
from tests.conftest import Served, make_unix_user, remove_unix_user
from tests.e2e.test_single import write_ctx

pytestmark = [pytest.mark.slow, pytest.mark.both_ways]  # trials forked and fresh (conftest)
ROOT = os.geteuid() == 0
NAMESPACES = sandbox.probe().on

# What probe scripts of trials start with: `out` (printed as JSON at the end) and `attempt`,
# which records whether an attack went through ("DONE") or the exception that stopped it.
ATTEMPT = """
import json, os
out = {"uid": os.getuid(), "gid": os.getgid()}
def attempt(name, fn):
    try:
        fn()
        out[name] = "DONE"
    except Exception as exc:
        out[name] = type(exc).__name__
"""

# Every attack of a trial that ran as root in issue 29, tried again: each line says what held.
PROBE = ATTEMPT + """
import ctypes, resource, signal, subprocess
state = os.environ["STATE"]
out.update(euid=os.geteuid(), user=os.environ.get("USER"))
status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines()
              if ":\\t" in l)
out["caps"] = [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
out["nnp"] = status["NoNewPrivs"].strip()
out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
attempt("umount", lambda: subprocess.run(["umount", "-l", state], check=True,
                                          capture_output=True))
for name in ("secret.key", "master.db"):
    attempt("read " + name, lambda n=name: open(os.path.join(state, n), "rb").read(1))
attempt("read shadow", lambda: open("/etc/shadow").read(1))
attempt("write root", lambda: open("/root/.dettui-trial-was-here", "w").write("x"))
attempt("signal master", lambda: os.kill(int(os.environ["MASTER_PID"]), 0))
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:3]
out["umask"] = os.umask(0o077)
# TMPDIR and /dev/shm are the allocation's own: nothing planted there by others, nothing left
import tempfile
out["tmpdir"] = tempfile.gettempdir()
out["sees host shm"] = os.path.exists("/dev/shm/" + os.environ["PLANT"])
for d in (tempfile.gettempdir(), "/dev/shm"):
    open(d + "/" + os.environ["PLANT"] + "-trial", "w").write("x")
from dettui import core
with core.init() as ctx:
    ctx.train.report_training_metrics(steps_completed=1, metrics={"x": 1.0})  # TensorBoard too
    with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, ckpt):
        (path / "w.txt").write_text("weights")
out["checkpoint"] = ckpt
print("PROBE " + json.dumps(out), flush=True)
"""


def _probe(served: Served, tmp_path: Path, name: str, owner: str = "determined") -> dict:
    state = served.state_dir.resolve()
    assert served.proc is not None
    (tmp_path / name).mkdir()
    cfg, ctx = write_ctx(tmp_path / name, f"""
        name: {name}
        entrypoint: python3 probe.py
        searcher: {{name: single, metric: x, max_length: 1}}
        environment:
          environment_variables: [STATE={state}, MASTER_PID={served.proc.pid}, PLANT={PLANT}]
        """, {"probe.py": PROBE})
    res = served.cli("-u", owner, "e", "create", str(cfg), str(ctx), "--follow", timeout=180)
    lines = [ln for ln in res.stdout.splitlines() if "PROBE " in ln]
    assert lines, res.stdout + res.stderr
    return dict(json.loads(lines[-1].split("PROBE ", 1)[1]))


PLANT = f"dettui-plant-{uuid.uuid4().hex}"
needs_root = pytest.mark.skipif(not ROOT, reason="trials change user only on a root agent "
                                "(this test run is not root)")
needs_ns = pytest.mark.skipif(not NAMESPACES, reason=f"no namespaces: {sandbox.probe().note}")


@needs_root
@needs_ns
def test_a_trial_on_a_root_agent_runs_unprivileged_and_cannot_reach_the_masters_secrets(
        served: Served, tmp_path: Path) -> None:
    planted = [Path(d) / PLANT for d in ("/tmp", "/dev/shm")]
    try:
        for path in planted:
            path.write_text("planted by another user")
        out = _probe(served, tmp_path, "attacker")
        assert out["tmpdir"] == "/run/determined/tmp" and not out["sees host shm"], out
        assert not any(Path(f"{p}-trial").exists() for p in planted)
    finally:
        for path in planted:
            path.unlink(missing_ok=True)
    me = served.api("GET", "/api/v1/me")["user"]["id"]
    own = trialuser.per_user(me)  # determined is not linked: a uid of its own, no account
    assert (out["uid"], out["euid"], out["gid"]) == (own.uid, own.uid, own.gid)
    assert out["user"] == f"dettui-{me}"
    assert out["caps"] == ["0000000000000000"] * 5, out  # no capability, none to gain at exec
    assert out["nnp"] == "1"
    assert out["nproc"] == sandbox.DEFAULT_NPROC
    for attack in ("umount", "read secret.key", "read master.db", "read shadow", "write root",
                   "signal master"):
        assert out[attack] != "DONE", f"{attack} succeeded: {out}"
    assert out["pids"][0] == 1 and out["pids"][-1] < 100, out  # its own PID namespace only
    assert out["umask"] == 0o077
    # its checkpoint is its own: made by its user, closed to others, and the master reads it
    ckpt = served.state_dir / "checkpoints" / out["checkpoint"]
    assert ckpt.stat().st_uid == own.uid
    assert ckpt.stat().st_mode & 0o077 == 0
    assert (ckpt / "w.txt").read_text() == "weights"
    # the state dir and the key stay closed by their modes, not only by the mounts
    assert served.state_dir.stat().st_mode & 0o077 == 0
    assert (served.state_dir / "secret.key").stat().st_mode & 0o077 == 0
    agents = served.cli("agent", "list").stdout
    assert "sandboxed, as a uid per user" in agents, agents
    # another unlinked user's trials run as another uid: they cannot read these checkpoints
    carol = served.api("POST", "/api/v1/users", {
        "user": {"username": "carol", "admin": False, "active": True}, "password": "",
        "isHashed": False}, token=served.admin_token())["user"]["id"]
    theirs = _probe(served, tmp_path, "carols", owner="carol")
    assert theirs["uid"] == trialuser.per_user(carol).uid != own.uid


@pytest.fixture
def unix_users() -> Iterator[list[pwd.struct_passwd]]:
    """Two throwaway Unix users (and their groups), removed afterwards."""
    if not ROOT:
        pytest.skip("creating Unix users needs root (this test run is not root)")
    names = [f"dt{uuid.uuid4().hex[:8]}" for _ in range(2)]
    made = []
    try:
        for name in names:
            make_unix_user(name)
            made.append(name)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in made:
            remove_unix_user(name)


@needs_ns
def test_two_linked_users_run_their_trials_as_their_own_unix_users(
        served: Served, tmp_path: Path, unix_users: list[pwd.struct_passwd]) -> None:
    admin = served.admin_token()
    for person, unix in zip(("alice", "bob"), unix_users, strict=True):
        made = served.api("POST", "/api/v1/users", {
            "user": {"username": person, "admin": False, "active": True}, "password": "",
            "isHashed": False}, token=admin)["user"]
        served.cli("-u", "admin", "user", "link-with-agent-user", person,
                   "--agent-uid", str(unix.pw_uid), "--agent-gid", str(unix.pw_gid),
                   "--agent-user", unix.pw_name, "--agent-group", unix.pw_name)
        assert made["username"] == person
    listed = served.cli("user", "list").stdout
    assert unix_users[0].pw_name in listed and unix_users[1].pw_name in listed, listed
    alice = _probe(served, tmp_path, "alices", owner="alice")
    bob = _probe(served, tmp_path, "bobs", owner="bob")
    for out, unix in ((alice, unix_users[0]), (bob, unix_users[1])):
        assert (out["uid"], out["gid"], out["user"]) == (unix.pw_uid, unix.pw_gid,
                                                         unix.pw_name)
        assert out["caps"][2] == "0000000000000000"
        ckpt = served.state_dir / "checkpoints" / out["checkpoint"]
        assert (ckpt.stat().st_uid, ckpt.stat().st_gid) == (unix.pw_uid, unix.pw_gid)
        assert ckpt.stat().st_mode & 0o077 == 0  # the other user's trials cannot read it
    # each user's trial wrote its TensorBoard events (the second one failed when the first
    # trial's user made the shared levels, 0700), in a directory of its own user's
    for unix in unix_users:
        events = [p for p in (served.state_dir / "checkpoints").glob(
            "*/tensorboard/experiment/*/trial/*/events.out.*") if p.stat().st_uid == unix.pw_uid]
        assert events, f"no TensorBoard events of {unix.pw_name}'s trial"
        assert events[0].parent.stat().st_uid == unix.pw_uid
        assert events[0].parent.parent.stat().st_uid == 0  # trial/: shared, root's


@needs_root
def test_an_agent_without_a_sandbox_refuses_trials_unless_told(headless: Served,
                                                                tmp_path: Path) -> None:
    """Where no namespace can be made (here: no util-linux on PATH), the agent stops with the
    reason; with --no-sandbox it runs and says so in `agent list`."""
    from tests.e2e.test_agent import start_agent

    bare = tmp_path / "bin"
    bare.mkdir()
    env = {"PATH": str(bare)}
    agent = start_agent(headless, tmp_path, "--id", "bare", env_extra=env)
    try:
        assert agent.wait(60) != 0
    finally:
        if agent.poll() is None:
            agent.kill()
    log = (tmp_path / "agent.log").read_text()
    assert "no sandbox can be made for trials" in log and "--no-sandbox" in log, log
    agent = start_agent(headless, tmp_path, "--id", "bare", "--no-sandbox", env_extra=env)
    try:
        headless.wait_for_agents(1)
        assert "OFF (--no-sandbox)" in headless.cli("agent", "list").stdout
    finally:
        agent.terminate()
        agent.wait(30)


def test_a_non_root_master_sandboxes_its_trials_in_a_user_namespace(
        tmp_path: Path, unix_users: list[pwd.struct_passwd]) -> None:
    """Attack 4: a master run by an ordinary user. Its trials run in a user namespace with no
    capabilities: the state dir is covered and cannot be uncovered, no host process is seen."""
    user = unix_users[0]
    probe = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                            "--clear-groups", os.sys.executable, "-c",  # type: ignore[attr-defined]
                            "from dettui.agent import sandbox; print(sandbox.probe())"],
                           capture_output=True, text=True, cwd="/")
    if probe.returncode != 0:
        pytest.skip(f"user {user.pw_name} cannot run this checkout's Python (it is not "
                    f"readable by other users): {probe.stderr.strip()[-200:]}")
    if "prefix=()" in probe.stdout:
        pytest.skip(f"no user namespaces for an ordinary user here: {probe.stdout.strip()}")
    home = Path(tempfile.mkdtemp(prefix="dettui-nonroot-"))
    try:
        os.chown(home, user.pw_uid, user.pw_gid)
        served = Served(home / "state", home / "config",
                        prefix=["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                                "--clear-groups", "env", f"HOME={home}"])
        served.start()
        try:
            out = _probe(served, home, "nonroot")
        finally:
            served.stop()
        assert out["uid"] == 0 and out["caps"] == ["0000000000000000"] * 5, out  # userns root
        assert out["nnp"] == "1"
        for attack in ("umount", "read secret.key", "read master.db", "signal master"):
            assert out[attack] != "DONE", f"{attack} succeeded: {out}"
        assert out["pids"][0] == 1 and out["pids"][-1] < 100, out
        ckpt = served.state_dir / "checkpoints" / out["checkpoint"]
        assert ckpt.stat().st_uid == user.pw_uid
    finally:
        shutil.rmtree(home, ignore_errors=True)


@needs_root
@needs_ns
def test_a_fork_bomb_stops_at_the_trials_process_limit(
        tmp_path: Path, unix_users: list[pwd.struct_passwd]) -> None:
    """Attack 9: 300 forks of 300 went through. With --trial-nproc 64 the trial's user may
    have 64 processes and threads: the 65th fork fails, and all of them end with the trial.
    (A throwaway user of its own: the limit counts every process of the user on the machine.)"""
    served = Served(tmp_path / "state", tmp_path / "config",
                    extra=["--agent-slots", "1", "--trial-nproc", "64",
                           "--trial-user", unix_users[0].pw_name])
    served.start()
    try:
        (tmp_path / "bomb").mkdir()
        cfg, ctx = write_ctx(tmp_path / "bomb", """
            name: bomb
            entrypoint: python3 bomb.py
            searcher: {name: single, metric: x, max_length: 1}
            """, {"bomb.py": """
            import os, time
            made = 0
            for _ in range(300):
                try:
                    pid = os.fork()
                except OSError as exc:
                    print("FORK REFUSED after", made, type(exc).__name__, flush=True)
                    break
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                made += 1
            else:
                print("FORKED ALL 300", flush=True)
            """})
        out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=180).stdout
        assert "FORK REFUSED after" in out, out
        made = int(out.split("FORK REFUSED after ", 1)[1].split()[0])
        assert 0 < made < 64, out
    finally:
        served.stop()


@needs_root
@needs_ns
def test_storage_a_user_names_is_reached_by_the_trials_permissions_only(
        served: Served, tmp_path: Path) -> None:
    """Second review: `checkpoint_storage: {host_path: /root/x}` let a trial read what /root
    closes (the sandbox covered /root and bound the storage back, and bound it at
    /determined_shared_fs), and a host_path that did not exist was made by the root agent."""
    closed = Path(tempfile.mkdtemp(prefix="dettui-closed-"))  # 0700, root's
    try:
        inside = closed / "open"
        inside.mkdir(mode=0o755)
        (inside / "secret.txt").write_text("ROOT-ONLY")
        (inside / "secret.txt").chmod(0o644)
        missing = closed.parent / f"dettui-missing-{uuid.uuid4().hex}" / "sub"
        for name, host_path in (("closed", inside), ("missing", missing)):
            (tmp_path / name).mkdir()
            cfg, ctx = write_ctx(tmp_path / name, f"""
                name: storage-{name}
                entrypoint: python3 peek.py
                searcher: {{name: single, metric: x, max_length: 1}}
                checkpoint_storage: {{type: shared_fs, host_path: {host_path}}}
                """, {"peek.py": f"""
                for path in ("/determined_shared_fs/secret.txt", "{host_path}/secret.txt"):
                    try:
                        print("READ", path, open(path).read())
                    except OSError as exc:
                        print("refused", path, type(exc).__name__)
                """})
            out = served.cli("e", "create", str(cfg), str(ctx), "--follow", timeout=120).stdout
            assert "READ" not in out and out.count("refused") == 2, out
            if name == "closed":
                assert "cannot pass" in out and str(closed) in out, out  # said at start
        assert not missing.parent.exists()  # the agent made nothing there
    finally:
        shutil.rmtree(closed, ignore_errors=True)
