"""The fork server survives what a request can do wrong, and never strands its children in a
PID namespace: a request it cannot fork gets an error while the trials it runs go on; where it
may unshare a PID namespace but not set its children back (root of a user namespace that does
not own the PID namespace), it does not use that way at all."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dettui.agent import forkserver, trial_exec


def _server() -> tuple[subprocess.Popen[bytes], socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-u", "-m", "dettui.agent.forkserver",
                             str(theirs.fileno()), "", ""], pass_fds=(theirs.fileno(),),
                            cwd="/", stdin=subprocess.DEVNULL)
    theirs.close()
    ours.settimeout(60)
    ready = json.loads(ours.recv(forkserver.MAX_MESSAGE))
    assert ready["ready"], ready
    return proc, ours


def _request(sock: socket.socket, tmp_path: Path, rid: str, script: str,
             plan: str | None = None) -> Path:
    out = tmp_path / f"{rid}.out"
    (tmp_path / f"{rid}.py").write_text(textwrap.dedent(script))
    env_file = tmp_path / f"{rid}.env"
    trial_exec.write(env_file, {"PATH": os.environ["PATH"]})
    request = {"id": rid, "kind": "script", "target": str(tmp_path / f"{rid}.py"), "args": [],
               "env_file": str(env_file), **({"plan": plan} if plan is not None else {})}
    with open(os.devnull, "rb") as null, open(out, "wb") as f:
        socket.send_fds(sock, [json.dumps(request).encode()],
                        [null.fileno(), f.fileno(), f.fileno()])
    return out


def _answers(sock: socket.socket, until: str) -> list[dict[str, object]]:
    got = []
    while True:
        msg = json.loads(sock.recv(forkserver.MAX_MESSAGE))
        got.append(msg)
        if msg.get("id") == until and "exit" in msg:
            return got


def test_a_request_the_server_cannot_fork_fails_alone(tmp_path: Path) -> None:
    proc, sock = _server()
    try:
        out = _request(sock, tmp_path, "1", """
            import time
            time.sleep(1.5)
            print("child done", flush=True)
        """)
        _request(sock, tmp_path, "2", "print('never')", plan='{"namespaces": true}')
        got = _answers(sock, "1")
        errors = [m for m in got if m.get("id") == "2"]
        assert errors and "error" in errors[0] and "plan" in str(errors[0]["error"]), got
        assert {"id": "1", "exit": 0} in got, got
        assert "child done" in out.read_text()
        assert proc.poll() is None, "the server exited"
    finally:
        sock.close()
        proc.wait(30)


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(os.geteuid() != 0 or UNSHARE is None,
                    reason="needs root and util-linux's unshare (a user namespace of root's)")
def test_a_server_that_cannot_set_pid_namespaces_back_does_not_make_them() -> None:
    """In `unshare --user --map-root-user` the server is root of a user namespace that does not
    own its PID namespace: unshare(CLONE_NEWPID) works there, setns back does not."""
    code = textwrap.dedent("""
        import os
        from dettui.agent import nsetup
        ns = nsetup.PidNamespaces()
        print("usable", ns.usable, flush=True)
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                print("child pid", os.getpid(), flush=True)
                os._exit(0)
            os.waitpid(pid, 0)
    """)
    res = subprocess.run([str(UNSHARE), "--user", "--map-root-user", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60)
    if "usable True" in res.stdout:
        pytest.skip("this kernel lets a user namespace's root set PID namespaces back")
    assert res.returncode == 0, res.stderr
    pids = [int(line.split()[-1]) for line in res.stdout.splitlines() if "child pid" in line]
    assert len(pids) == 2 and 1 not in pids, res.stdout
