"""The fork server's trial gets the sandbox the shell script gives (`nsetup.enter` against
`sandbox.wrap`): run on both with one plan, a probe inside prints the same namespaces, mounts,
user, capabilities, limits, work dir and umask; a swapped storage directory is refused with
the script's message; the intermediate outside the PID namespace ends as its init did (code,
or signal); SIGKILL of the intermediate leaves no process of the namespace.

Real namespaces, a real Unix user: each child is forked by a runner started for the test
(RUNNER), never by pytest's own process. `python tests/agent/test_nsetup.py` prints the time of
both setups (medians of 20)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from dettui.agent import nsetup, runinfo, sandbox, trialuser
from tests.conftest import make_unix_user, remove_unix_user

SUPPORT = sandbox.probe()
ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parents[2]

# What a trial sees of its sandbox, as JSON: run by the init after `enter` and, through `-c`,
# as the entrypoint of `wrap`'s script. ARGS: the hidden and kept directories.
PROBE = r"""
import ctypes, json, os, resource
hidden, kept = ARGS
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
mounts = []
for line in open("/proc/self/mountinfo"):
    left, right = line.split(" - ")
    f = left.split()
    fstype, source, sopts = right.split()
    mounts.append([f[4], f[5], fstype, source, sopts])
pdeathsig = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)
print(json.dumps({
    "pid": os.getpid(), "hidden": sorted(os.listdir(hidden)), "kept": sorted(os.listdir(kept)),
    "run_determined": sorted(os.listdir("/run/determined"))[:20],
    "run": sorted(os.listdir("/run")),
    "fresh": {e: sorted(os.listdir(f"/run/{e}/determined")) for e in os.listdir("/run")
              if e.startswith("dettui-nsetup-")},
    "shm": os.readlink("/run/shm") if os.path.islink("/run/shm") else None,
    "uid": os.getresuid(), "gid": os.getresgid(), "groups": sorted(os.getgroups()),
    "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": status["NoNewPrivs"].strip(), "umask": status["Umask"].strip(),
    "sigblk": status["SigBlk"].strip(), "cwd": os.getcwd(), "pdeathsig": pdeathsig.value,
    "nproc": resource.getrlimit(resource.RLIMIT_NPROC), "mounts": mounts,
    "proc_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
}), flush=True)
"""

# Forks the child that enters the plan (as the fork server does), then reports how it ended:
# argv: PLAN_JSON MODE ARGS... ; the last line on stdout is {"exited": n} or {"signaled": n}.
RUNNER = r"""
import json, os, signal, sys, time
from dettui.agent import nsetup
plan, mode, args = nsetup.Plan.from_json(sys.argv[1]), sys.argv[2], sys.argv[3:]
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(ready_r)
    nsetup.enter(plan)
    if mode == "probe":
        exec(PROBE, {"ARGS": args})
        os._exit(0)
    if mode == "exit":
        os._exit(int(args[0]))
    if mode == "marker":  # a process of the namespace, another one double-forked, then wait
        if os.fork() == 0:
            if os.fork() == 0:
                os.execv("/bin/sh", ["sh", "-c", "sleep 300; :", args[0]])
            os._exit(0)
        os.wait()
    os.write(ready_w, b"r")
    os.execv("/bin/sh", ["sh", "-c", "sleep 300; :", args[0] if args else "sleeper"])
os.close(ready_w)
if mode in ("kill-init", "marker", "term-intermediate"):
    os.read(ready_r, 1)
    if mode == "term-intermediate":  # held, as by unshare: the init goes on
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        print(json.dumps({"alive_after_sigterm": os.waitpid(pid, os.WNOHANG) == (0, 0)}))
    if mode in ("kill-init", "term-intermediate"):
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            os.kill(int(f.read().split()[0]), signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)
_, status = os.waitpid(pid, 0)
end = {"exited": os.WEXITSTATUS(status)} if os.WIFEXITED(status) else {
    "signaled": os.WTERMSIG(status)}
print(json.dumps(end), flush=True)
"""

# `runs` times: fork, enter, a byte on a pipe from the trial (its first line), its exit
TIMER = r"""
import os, statistics, sys, time
from dettui.agent import nsetup
plan, ready, done = nsetup.Plan.from_json(sys.argv[1]), [], []
for _ in range(int(sys.argv[2])):
    r, w = os.pipe()
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        nsetup.enter(plan)
        os.write(w, b"r")
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    ready.append(time.perf_counter() - t)
    os.waitpid(pid, 0)
    done.append(time.perf_counter() - t)
    os.close(r)
print(f"{statistics.median(ready) * 1e3:.1f} {statistics.median(done) * 1e3:.1f}")
"""

needs_namespaces = pytest.mark.skipif(
    not (ROOT and SUPPORT.on),
    reason="needs root and Linux namespaces (unshare(2) refused here, or not root)")


@dataclass(frozen=True)
class Scene:
    base: Path
    hidden: Path
    kept: Path
    run: Path
    work: Path
    user: trialuser.TrialUser


@pytest.fixture(scope="module")
def unix_user() -> Iterator[trialuser.TrialUser]:
    if not ROOT:
        pytest.skip("creating a Unix user needs root (this test run is not root)")
    name = f"dn{uuid.uuid4().hex[:8]}"
    make_unix_user(name)
    try:
        yield trialuser.named(name)
    finally:
        remove_unix_user(name)


@pytest.fixture
def scene(unix_user: trialuser.TrialUser) -> Iterator[Scene]:
    # in /tmp with modes every user passes, so that what is covered is `hidden` only
    base = Path(tempfile.mkdtemp(prefix="dettui-nsetup-", dir="/tmp"))
    try:
        base.chmod(0o755)
        hidden, run, work = base / "hidden", base / "run", base / "work"
        kept = hidden / "kept"
        for d in (hidden, kept, run, work):
            d.mkdir(mode=0o755, exist_ok=True)
            d.chmod(0o755)
        (hidden / "secret.txt").write_text("SECRET\n")
        (kept / "model.pt").write_text("weights\n")
        (run / "info.json").write_text("{}\n")
        yield Scene(base, hidden, kept, run, work, unix_user)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _arguments(s: Scene, identity: str = "") -> dict[str, object]:
    return {"cwd": s.work, "hidden": [s.hidden], "kept": [s.kept],
            "mounts": [runinfo.Mount(s.run, "/run/determined", identity)], "user": s.user,
            "nproc": 777, "reach": [s.work]}


def _forked(plan: nsetup.Plan, mode: str, *args: str, user: trialuser.TrialUser | None = None
            ) -> tuple[dict[str, int], subprocess.CompletedProcess[str]]:
    """The runner's end ({"exited": n} or {"signaled": n}) and its output; run as `user`
    (a non-root agent) when given."""
    who = {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
    res = subprocess.run([sys.executable, "-c", f"PROBE = {PROBE!r}\n{RUNNER}", plan.to_json(),
                          mode, *args], capture_output=True, text=True, timeout=60,
                         cwd="/", stdin=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, **who)
    lines = res.stdout.splitlines()
    assert lines, res.stderr
    return json.loads(lines[-1]), res


def _scripted(s: Scene, arguments: dict[str, object], support: sandbox.Support = SUPPORT,
              user: trialuser.TrialUser | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-I", "-S", "-c", f"import sys; ARGS = sys.argv[1:]\n{PROBE}",
            str(s.hidden), str(s.kept)]
    launch = sandbox.wrap(support, argv, **arguments)  # type: ignore[arg-type]
    who = {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
    return subprocess.run(launch.argv, capture_output=True, text=True, timeout=60, cwd="/",
                          stdin=subprocess.DEVNULL,
                          env={**sandbox.stage_environment({}), **launch.env}, **who)


UNCOMPARED = {"sigblk", "pid", "proc_pids", "pdeathsig"}


def _same(seen: dict[str, object]) -> dict[str, object]:
    """What both ways must show alike. Not: the pid (the script's commands took pids before
    the trial's), the mask, and the parent-death signal: the trial is the child of the
    namespace's root init both ways (whose end ends it), armed again by setpriv only when
    the user changes; each way keeps the trial out of pid 1."""
    assert seen["pid"] != 1 and seen["proc_pids"] == [1, seen["pid"]], seen
    return {k: v for k, v in seen.items() if k not in UNCOMPARED}


def _seen(stdout: str) -> dict[str, object]:
    seen: dict[str, object] = json.loads(stdout.splitlines()[0])
    return seen


@needs_namespaces
def test_enter_makes_the_sandbox_the_script_makes(scene: Scene) -> None:
    arguments = _arguments(scene)
    plan = sandbox.plan(SUPPORT, **arguments)  # type: ignore[arg-type]
    assert plan.namespaces and plan.change_user and plan.drop
    assert plan.hidden == (str(scene.hidden),)
    end, forked = _forked(plan, "probe", str(scene.hidden), str(scene.kept))
    assert end == {"exited": 0}, forked.stderr
    assert forked.stderr == ""
    scripted = _scripted(scene, arguments)
    assert scripted.returncode == 0, scripted.stderr
    got, want = _seen(forked.stdout), _seen(scripted.stdout)
    user = scene.user
    assert got["pid"] != 1 and got["proc_pids"] == [1, got["pid"]]  # the init (root) is 1
    assert got["hidden"] == ["kept"]  # the secret covered, the kept directory bound back
    assert got["kept"] == ["model.pt"] and got["run_determined"] == ["info.json"]
    assert got["uid"] == [user.uid] * 3 and got["gid"] == [user.gid] * 3
    assert got["groups"] == sorted(user.groups)
    assert set(got["caps"].values()) == {"0000000000000000"}  # type: ignore[attr-defined]
    assert got["no_new_privs"] == "1" and got["umask"] == "0077"
    assert got["cwd"] == str(scene.work) and got["nproc"] == [777, 777]
    assert got["pdeathsig"] == signal.SIGKILL
    # and everything as the script makes it, every mount with its options included
    assert _same(got) == _same(want)
    assert got["sigblk"] == "0000000000000000"  # the runner's mask: nothing blocked


@needs_namespaces
def test_a_storage_directory_swapped_after_the_check_is_refused_as_the_script_does(
        scene: Scene) -> None:
    other = trialuser.pin(scene.hidden)  # what the agent checked is another directory now
    assert other is not None
    arguments = _arguments(scene, other.identity)
    end, forked = _forked(sandbox.plan(SUPPORT, **arguments),  # type: ignore[arg-type]
                          "probe", str(scene.hidden), str(scene.kept))
    scripted = _scripted(scene, arguments)
    refusal = f"checkpoint storage {scene.run} changed while the trial started; refusing\n"
    assert (end, forked.stdout.splitlines()[:-1], forked.stderr) == ({"exited": 1}, [], refusal)
    assert (scripted.returncode, scripted.stdout, scripted.stderr) == (1, "", refusal)


@needs_namespaces
def test_a_step_that_fails_is_one_line_naming_it(scene: Scene) -> None:
    plan = sandbox.plan(SUPPORT, **_arguments(scene))  # type: ignore[arg-type]
    plan = replace(plan, binds=((str(scene.base / "gone"), str(scene.base / "t"), "-"),))
    end, res = _forked(plan, "exit", "0")
    assert end == {"exited": 1}
    assert res.stderr == (f"dettui sandbox: mount --rbind {scene.base / 'gone'} "
                          f"{scene.base / 't'}: No such file or directory\n")


@needs_namespaces
def test_the_intermediate_ends_as_the_init_did(scene: Scene) -> None:
    plan = sandbox.plan(SUPPORT, **_arguments(scene))  # type: ignore[arg-type]
    assert _forked(plan, "exit", "3")[0] == {"exited": 3}
    assert _forked(plan, "exit", "0")[0] == {"exited": 0}
    end, res = _forked(plan, "kill-init")
    assert end == {"signaled": signal.SIGKILL}, res.stderr  # death by SIGKILL, not 137
    # SIGTERM of the intermediate is held until the init ends (as `unshare --fork` holds it:
    # a trial's own SIGTERM handler is reached by the agent's signal to the init)
    end, res = _forked(plan, "term-intermediate")
    assert end == {"signaled": signal.SIGKILL}, res.stderr
    assert json.loads(res.stdout.splitlines()[0]) == {"alive_after_sigterm": True}


def _marked(marker: str) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    out.append(int(pid))
        except OSError:
            continue
    return out


@needs_namespaces
def test_sigkill_of_the_intermediate_leaves_no_process_of_the_namespace(scene: Scene) -> None:
    plan = sandbox.plan(SUPPORT, **_arguments(scene))  # type: ignore[arg-type]
    marker = f"dettui-nsetup-{uuid.uuid4().hex}"
    end, res = _forked(plan, "marker", marker)
    assert end == {"signaled": signal.SIGKILL}, res.stderr
    deadline = time.monotonic() + 5
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(marker) == []


@needs_namespaces
def test_a_root_trial_user_keeps_uid_0_and_no_capability(scene: Scene) -> None:
    arguments = {**_arguments(scene), "user": trialuser.TrialUser(0, 0, "root")}
    plan = sandbox.plan(SUPPORT, **arguments)  # type: ignore[arg-type]
    assert (plan.change_user, plan.drop, plan.nproc) == (False, True, None)
    end, forked = _forked(plan, "probe", str(scene.hidden), str(scene.kept))
    assert end == {"exited": 0}, forked.stderr
    scripted = _scripted(scene, arguments)
    got, want = _seen(forked.stdout), _seen(scripted.stdout)
    assert got["uid"] == [0, 0, 0] and got["no_new_privs"] == "1"
    assert set(got["caps"].values()) == {"0000000000000000"}  # type: ignore[attr-defined]
    assert _same(got) == _same(want)


def _unprivileged() -> sandbox.Support:
    """A non-root agent's sandbox: a user namespace in which its user is root."""
    unshare = shutil.which("unshare", path=sandbox.SYSTEM_PATH)
    assert unshare is not None
    return sandbox.Support((unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork",
                            "--kill-child", "--mount-proc"), None, root=False)


@needs_namespaces
def test_a_non_root_agents_trial_gets_the_user_namespace_the_script_gives(scene: Scene) -> None:
    """The agent's own user (here the test's Unix user) is root in a user namespace of the
    trial's, without capabilities."""
    os.makedirs("/run/determined", exist_ok=True)  # as a root agent leaves it (see below)
    os.chown(scene.run, scene.user.uid, scene.user.gid)  # the agent's run dir is its own
    arguments = {**_arguments(scene), "user": None}
    plan = sandbox.plan(_unprivileged(), **arguments)  # type: ignore[arg-type]
    assert plan.user_namespace and not plan.change_user and plan.drop
    end, forked = _forked(plan, "probe", str(scene.hidden), str(scene.kept), user=scene.user)
    assert end == {"exited": 0}, forked.stderr
    scripted = _scripted(scene, arguments, _unprivileged(), user=scene.user)
    assert scripted.returncode == 0, scripted.stderr
    got, want = _seen(forked.stdout), _seen(scripted.stdout)
    assert got["pid"] != 1 and got["uid"] == [0, 0, 0] and got["hidden"] == ["kept"]
    assert set(got["caps"].values()) == {"0000000000000000"}  # type: ignore[attr-defined]
    assert _same(got) == _same(want)


@needs_namespaces
def test_run_is_opened_for_a_target_that_cannot_be_made_there(scene: Scene) -> None:
    """Where /run is closed (a user namespace), a tmpfs goes over it with its entries bound
    back, and the target is made in it. (The script fails here on hosts with /run/mount:
    its own `mount` calls make /run/mount, for libmount's utab, before its `mkdir`.)"""
    fresh = f"/run/dettui-nsetup-{uuid.uuid4().hex[:8]}"  # not on the host
    os.chown(scene.run, scene.user.uid, scene.user.gid)
    arguments = {**_arguments(scene), "user": None,
                 "mounts": [runinfo.Mount(scene.run, f"{fresh}/determined"),
                            runinfo.Mount(scene.run, "/run/determined")]}
    plan = sandbox.plan(_unprivileged(), **arguments)  # type: ignore[arg-type]
    end, forked = _forked(plan, "probe", str(scene.hidden), str(scene.kept), user=scene.user)
    assert end == {"exited": 0}, forked.stderr
    got = _seen(forked.stdout)
    on_run = [m[:4] for m in got["mounts"] if m[0] == "/run"]  # type: ignore[attr-defined]
    assert on_run[-1] == ["/run", "rw,relatime", "tmpfs", "dettui-run"]
    host = {e for e in os.listdir("/run") if not e.startswith("..")}
    assert set(got["run"]) == host | {fresh.removeprefix("/run/")}  # type: ignore[arg-type]
    assert got["fresh"] == {fresh.removeprefix("/run/"): ["info.json"]}
    if os.path.islink("/run/shm"):  # a link of the host's, made again
        assert got["shm"] == os.readlink("/run/shm")
    assert not os.path.exists(fresh)


def test_the_plan_travels_as_json_and_nothing_else_passes_for_one() -> None:
    plan = nsetup.Plan(True, False, ("/h",), (("/s", "/run/determined", "1:2"),),
                       (("/h/k\udcff", "-"),), ("/dev/shm",), "/w", 5, 6, (), 10, True, True)
    text = plan.to_json()
    assert text.isascii() and nsetup.Plan.from_json(text) == plan
    data = json.loads(text)
    for change in ({"uid": "0"}, {"groups": [-1]}, {"drop": 1}, {"hidden": ["/a\0b"]},
                   {"extra": 1}, {"uid": None}):
        with pytest.raises(ValueError, match="not a sandbox plan"):
            nsetup.Plan.from_json(json.dumps({**data, **change}))


def test_the_plan_says_what_become_says_without_namespaces(tmp_path: Path) -> None:
    user = trialuser.TrialUser(12345, 23456, "someone", (7, 8))
    off = sandbox.Support((), "no namespaces here", root=True)
    plan = sandbox.plan(off, tmp_path, [tmp_path], [], user=user, nproc=50)
    assert plan == nsetup.Plan(False, False, cwd=str(tmp_path), uid=12345, gid=23456,
                               groups=(7, 8), nproc=50, drop=True, change_user=True)
    assert sandbox.become(off, user, 50)[:3] == ["prlimit", "--nproc=50:50", "--"]
    unprivileged = sandbox.Support(("unshare", "--user"), None, root=False)
    plan = sandbox.plan(unprivileged, tmp_path, [], [], user=user, nproc=50)
    assert (plan.user_namespace, plan.change_user, plan.uid, plan.nproc, plan.drop) == (
        True, False, None, None, True)


@needs_namespaces
def test_without_namespaces_only_the_user_changes(scene: Scene) -> None:
    off = sandbox.Support((), "no namespaces here", root=True)
    plan = sandbox.plan(off, scene.work, [], [], user=scene.user, nproc=321)
    end, res = _forked(plan, "probe", str(scene.hidden), str(scene.kept))
    assert end == {"exited": 0}, res.stderr
    got = _seen(res.stdout)
    assert got["pid"] != 1 and got["hidden"] == ["kept", "secret.txt"]
    assert got["uid"] == [scene.user.uid] * 3 and got["nproc"] == [321, 321]
    assert set(got["caps"].values()) == {"0000000000000000"}  # type: ignore[attr-defined]
    assert (got["no_new_privs"], got["umask"], got["cwd"]) == ("1", "0077", str(scene.work))


def _time_both(runs: int = 20) -> None:
    """Medians of `runs`: fork + enter + exit of the init, against `wrap`'s script with
    /bin/true as the entrypoint, for a root agent's plan of one hidden, one kept and one
    mounted directory and a user change."""
    name = f"dn{uuid.uuid4().hex[:8]}"
    make_unix_user(name)
    base = Path(tempfile.mkdtemp(prefix="dettui-nsetup-", dir="/tmp"))
    try:
        base.chmod(0o755)
        for d in ("hidden/kept", "run", "work"):
            (base / d).mkdir(parents=True, mode=0o755)
        user = trialuser.named(name)
        arguments = {"cwd": base / "work", "hidden": [base / "hidden"],
                     "kept": [base / "hidden" / "kept"],
                     "mounts": [runinfo.Mount(base / "run", "/run/determined")], "user": user,
                     "nproc": 4096, "reach": [base / "work"]}
        plan = sandbox.plan(SUPPORT, **arguments)  # type: ignore[arg-type]
        out = subprocess.run([sys.executable, "-c", TIMER, plan.to_json(), str(runs)],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
        ready, done = out.split()
        launch = sandbox.wrap(SUPPORT, ["/bin/true"], **arguments)  # type: ignore[arg-type]
        env = {**sandbox.stage_environment({}), **launch.env}
        shell = []
        for _ in range(runs):
            t = time.perf_counter()
            subprocess.run(launch.argv, env=env, cwd="/", check=True)
            shell.append(time.perf_counter() - t)
        print(f"nsetup.enter: {ready} ms to the trial's first line, {done} ms to its exit; "
              f"sandbox.wrap's script: {statistics.median(shell) * 1e3:.1f} ms to the exit of "
              f"/bin/true (medians of {runs})")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        remove_unix_user(name)


if __name__ == "__main__":
    _time_both()
