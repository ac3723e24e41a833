"""The README's "Running it for a lab", followed as printed by a new lab admin (issue 29): a
root `dettui serve` with its password from a file (on 127.0.0.1 here), users alice and bob
linked to two throwaway Unix users, a second agent joining with a token file (on this same
machine: it stands for the GPU machine), and both users' experiments run to COMPLETED, each
trial's files owned by its user. Then the README's trust table, row by row: alice cannot
pause or kill bob's experiment (the CLI says why), bob's trial can neither read nor write
alice's checkpoint, and neither its allocation token nor bob's session nor the agent's
credential reaches what the table says they cannot.

The README's commands are run through bash as printed; only its stand-ins are filled in
(MASTER:8080, /root/ and /shared/ under this test's directory, the uids and names of the
Unix users, the typed passwords). tests/e2e/test_readme.py leaves these commands to this test
(`lab_commands`)."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dettui.agent import sandbox
from tests.conftest import REPO, Served, make_unix_user, remove_unix_user
from tests.e2e.test_trial_users import ATTEMPT

pytestmark = pytest.mark.slow

SECTION = (REPO / "README.md").read_text().split("### Running it for a lab\n", 1)[-1] \
    .split("\n### ", 1)[0]
PASSWORDS = {"alice": "alice-Secret-1", "bob": "bob-Secret-2"}
README_UIDS = {"alice": "1001", "bob": "1002"}  # the README's example link of each
LINK = re.compile(r"--agent-uid (\d+) --agent-gid \d+ --agent-user \w+ --agent-group \w+")
CHECKPOINT = re.compile(r"checkpoint ([0-9a-f-]{36}) at step")


def blocks() -> list[list[str]]:
    """The section's bash blocks: each one's lines, without comments and blank lines."""
    found = re.findall(r"```bash\n(.*?)```", SECTION, re.S)
    return [[ln.split("  #", 1)[0].strip() for ln in b.splitlines() if ln.split("  #", 1)[0]
             .strip()] for b in found]


def lab_commands() -> list[str]:
    """The section's `dettui ...` lines, as tests/e2e/test_readme.py collects them."""
    return [ln for block in blocks() for ln in block if ln.startswith("dettui")]


@dataclass
class Lab:
    """The lab's master and the people at it: each one's own config dir (their stored login)."""

    tmp: Path
    served: Served
    unix: dict[str, pwd.struct_passwd]
    # where the README's /shared/ goes: a directory every user can pass, as /shared is (the
    # test's own tmp dir is 0700, and a trial reaches storage a user names by its permissions)
    open_dir: Path = field(default_factory=lambda: Path("/nonexistent"))
    ran: set[str] = field(default_factory=set)

    def fill(self, line: str) -> str:
        line = line.replace("http://MASTER:8080", self.served.url)
        line = line.replace("/root/", f"{self.tmp}/root/").replace("/shared/",
                                                                    f"{self.open_dir}/shared/")

        def link(m: re.Match[str]) -> str:
            who = {v: k for k, v in README_UIDS.items()}.get(m.group(1))
            if who is None:  # not the README's
                return m.group(0)
            u = self.unix[who]
            return (f"--agent-uid {u.pw_uid} --agent-gid {u.pw_gid} --agent-user {u.pw_name} "
                    f"--agent-group {u.pw_name}")
        return LINK.sub(link, line)

    def env(self, who: str) -> dict[str, str]:
        env = self.served.env()
        env.pop("DET_PASS", None)  # each logs in as the README says
        env["DETTUI_CONFIG_DIR"] = str(self.tmp / who / "config")
        env["XDG_DATA_HOME"] = str(self.tmp / who / "data")  # an agent's default work dir
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `dettui` as installed
        return env

    def sh(self, who: str, line: str, stdin: str = "", check: bool = True,
           cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        """One README line through bash, as `who`; no terminal, so a password is read from
        stdin (where a person would type it)."""
        if line.startswith("dettui"):
            self.ran.add(line)
        res = subprocess.run(["bash", "-c", self.fill(line)], cwd=cwd, env=self.env(who),
                             input=stdin, capture_output=True, text=True, timeout=300,
                             start_new_session=True)
        if check:
            assert res.returncode == 0, f"{who}: {line}\n{res.stdout}\n{res.stderr}"
        return res

    def api(self, method: str, path: str, token: str, body: object = None) -> int:
        """The status of one request with `token`."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.served.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)


@pytest.fixture
def lab_users() -> Iterator[dict[str, pwd.struct_passwd]]:
    """Unix users for alice and bob, made for this test and removed after it."""
    if os.geteuid() != 0:
        pytest.skip("the lab set-up runs a root master and makes Unix users (this test run "
                    "is not root)")
    if not sandbox.probe().on:
        pytest.skip(f"no sandbox for trials here: {sandbox.probe().note}")
    made: dict[str, str] = {}
    try:
        for person in PASSWORDS:
            name = f"dt{person[:2]}{uuid.uuid4().hex[:6]}"
            make_unix_user(name)
            made[person] = name
        yield {person: pwd.getpwnam(name) for person, name in made.items()}
    finally:
        for name in made.values():
            remove_unix_user(name)


def test_a_lab_set_up_as_the_readme_prints_it(tmp_path: Path,
                                              lab_users: dict[str, pwd.struct_passwd]) -> None:
    admin, gpu, people = blocks()
    (tmp_path / "root").mkdir(mode=0o700)
    served = Served(tmp_path / "state", tmp_path / "admin" / "config")
    open_dir = Path(tempfile.mkdtemp(prefix="dettui-lab-"))
    open_dir.chmod(0o755)
    lab = Lab(tmp_path, served, lab_users, open_dir)
    start_master(lab, admin[:2])
    agent = None
    try:
        set_up_users(lab, admin[2:])
        agent = join_the_agent(lab, gpu)
        samples = {who: run_the_sample(lab, people, who) for who in PASSWORDS}
        for who, ckpt in samples.items():  # each trial's checkpoint is its user's, 0700
            st = (served.state_dir / "checkpoints" / ckpt).stat()
            assert (st.st_uid, st.st_gid) == (lab_users[who].pw_uid, lab_users[who].pw_gid)
            assert st.st_mode & 0o077 == 0
        assert set(lab_commands()) <= lab.ran, "a README command of the lab went unrun"
        check_the_trust_table(lab, samples["alice"])
    finally:
        if agent is not None:
            agent.terminate()
            agent.wait(30)
        served.stop()
        shutil.rmtree(open_dir, ignore_errors=True)


def start_master(lab: Lab, lines: list[str]) -> None:
    """The password file, then `dettui serve` from it (on 127.0.0.1, any free port)."""
    made, serve = lines
    assert made.startswith("(umask 077;") and made.endswith("> /root/admin.pass)"), made
    lab.sh("admin", made)
    pass_file = lab.tmp / "root" / "admin.pass"
    assert pass_file.stat().st_mode & 0o077 == 0
    assert serve == "dettui serve --host 0.0.0.0 --admin-password-file /root/admin.pass &"
    lab.ran.add(serve)
    argv = lab.fill(serve).removesuffix(" &").split()[2:]
    lab.served.extra = [*argv, "--agent-slots", "1"]
    lab.served.extra[argv.index("0.0.0.0")] = "127.0.0.1"
    lab.served.password = pass_file.read_text().strip()
    lab.served.start()


def set_up_users(lab: Lab, lines: list[str]) -> None:
    """The admin logs in, creates alice and bob, links them and issues the agent's token."""
    for line in lines:
        stdin = ""
        if line == "dettui user login admin":
            stdin = lab.served.password + "\n"
        elif line.startswith("dettui user create "):
            stdin = PASSWORDS[line.split()[-1]] + "\n"
            stdin += stdin
        res = lab.sh("admin", line, stdin, cwd=lab.tmp / "root")
        if line == "dettui user list":
            for unix in lab.unix.values():
                assert f"{unix.pw_uid}:{unix.pw_gid} ({unix.pw_name}:{unix.pw_name})" in \
                    res.stdout, res.stdout
    token = lab.tmp / "root" / "gpu-1.token"
    assert token.stat().st_mode & 0o077 == 0 and len(token.read_text().strip()) >= 20


def join_the_agent(lab: Lab, lines: list[str]) -> subprocess.Popen[str]:
    """The token file copied to "the GPU machine" (chmod 600), its agent started from it."""
    join, listing = lines
    machine = lab.tmp / "gpu"
    machine.mkdir(mode=0o700)
    token = machine / "gpu-1.token"
    token.write_text((lab.tmp / "root" / "gpu-1.token").read_text())
    token.chmod(0o600)
    assert join == "dettui agent --master http://MASTER:8080 --token-file gpu-1.token"
    lab.ran.add(join)
    agent = subprocess.Popen(["bash", "-c", f"exec {lab.fill(join)} --slots 1"], cwd=machine,
                             env=lab.env("gpu"), stdout=subprocess.DEVNULL,
                             stderr=open(machine / "agent.log", "w"),  # noqa: SIM115
                             text=True)
    lab.served.wait_for_agents(2, timeout=60)
    rows = [ln.split("│") for ln in lab.sh("admin", listing).stdout.splitlines()]
    joined = [r for r in rows if len(r) > 2 and r[1].strip() == socket.gethostname()]
    assert joined and "sandboxed, as a uid per user" in joined[0][-2], rows
    return agent


def run_the_sample(lab: Lab, lines: list[str], who: str) -> str:
    """`who` logs in and runs the README's sample to COMPLETED: its checkpoint's uuid."""
    export, login, create = lines
    assert export == "export DET_MASTER=http://MASTER:8080"  # Lab.env sets it
    lab.sh(who, login.replace("alice", who), PASSWORDS[who] + "\n")
    res = lab.sh(who, create)
    assert "ended: COMPLETED" in res.stdout, res.stdout + res.stderr
    return CHECKPOINT.findall(res.stdout)[-1]


# What a trial of alice's or bob's does: writes in its work dir and a checkpoint, and, for bob,
# tries alice's files and, with its allocation token and bob's session, alice's runs.
PROBE = ATTEMPT + """
import urllib.error, urllib.request
env = os.environ
out["agent"] = env["DET_AGENT_ID"]
with open("written.txt", "w") as f:
    f.write("mine")
out["cwd"] = [os.stat(".").st_uid, os.stat(".").st_mode & 0o777]
out["written"] = [os.stat("written.txt").st_uid, os.stat("written.txt").st_gid]
def call(method, path, body=None, alloc=True):
    key = "DET_SESSION_TOKEN" if alloc else "DET_USER_TOKEN"
    head = "Grpc-Metadata-x-allocation-token" if alloc else "Authorization"
    req = urllib.request.Request(env["DET_MASTER"].rstrip("/") + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={head: "Bearer " + env[key]})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
attempt("read passwd", lambda: open("/etc/passwd").read(1))
if "VICTIM" in env:
    v = env["VICTIM"]
    attempt("list victim", lambda: os.listdir(v))
    attempt("read victim", lambda: open(os.path.join(v, "w.txt")).read())
    attempt("write victim", lambda: open(os.path.join(v, "evil.pt"), "w").write("x"))
    attempt("move victim", lambda: os.rename(v, v + ".gone"))
    attempt("read sample", lambda: os.listdir(env["VICTIM_SAMPLE"]))
    attempt("read token file", lambda: open(env["TOKEN_FILE"]).read())
    attempt("read secret.key", lambda: open(env["STATE"] + "/secret.key", "rb").read())
    attempt("read shadow", lambda: open("/etc/shadow").read(1))
    exp, trial, ckpt = env["ALICE"].split()
    metrics = {"metrics": {"trialId": int(trial), "trialRunId": 1, "stepsCompleted": 1,
                           "avgMetrics": {"loss": 1.0}}, "group": "training"}
    out["api"] = {
        "token: users": call("GET", "/api/v1/users"),
        "token: agents": call("GET", "/api/v1/agents"),
        "token: alice's experiment": call("GET", "/api/v1/experiments/" + exp),
        "token: alice's checkpoint": call("GET", "/api/v1/checkpoints/" + ckpt),
        "token: alice's metrics": call("POST", f"/api/v1/trials/{trial}/metrics", metrics),
        "token: own trial": call("GET", "/api/v1/trials/" + env["DET_TRIAL_ID"]),
        "session: alice's metrics": call("POST", f"/api/v1/trials/{trial}/metrics", metrics,
                                         alloc=False),
        "session: kill alice's": call("POST", f"/api/v1/experiments/{exp}/kill", alloc=False),
        "session: alice's checkpoint": call("GET", "/api/v1/checkpoints/" + ckpt,
                                            alloc=False),
    }
from dettui import core
with core.init() as ctx:
    with ctx.checkpoint.store_path({"steps_completed": 1}) as (path, uuid):
        (path / "w.txt").write_text("weights")
out["checkpoint"] = uuid
print("PROBE " + json.dumps(out), flush=True)
"""


def probe_experiment(lab: Lab, who: str, env: dict[str, str]) -> Path:
    """A probe's config (its checkpoints in the README's shared storage) and context."""
    base = lab.tmp / f"probe-{who}"
    (base / "ctx").mkdir(parents=True)
    (base / "ctx" / "probe.py").write_text(PROBE)
    variables = json.dumps([f"{k}={v}" for k, v in env.items()])  # JSON is YAML
    (base / "exp.yaml").write_text(textwrap.dedent(f"""\
        name: probe-{who}
        entrypoint: python3 probe.py
        searcher: {{name: single, metric: x, max_length: 1}}
        checkpoint_storage: {{type: shared_fs, host_path: {lab.open_dir}/shared/checkpoints}}
        environment:
          environment_variables: {variables}
        """))
    return base


def probe_output(text: str) -> dict:
    lines = [ln for ln in text.splitlines() if "PROBE " in ln]
    assert lines, text
    return dict(json.loads(lines[-1].split("PROBE ", 1)[1]))


def check_the_trust_table(lab: Lab, alice_sample: str) -> None:
    """The README's table, row by row, on the running lab: probes run on the joined agent."""
    made = re.search(r"`(install -d -m 1777 /shared/checkpoints)`", SECTION.replace("\n", " "))
    assert made, "the README's shared storage"
    lab.sh("admin", made.group(1))
    local = f"{socket.gethostname()}-local"
    lab.sh("admin", f"dettui agent disable {local}")
    alice = probe_experiment(lab, "alice", {})
    res = lab.sh("alice", f"dettui e create {alice}/exp.yaml {alice}/ctx --follow")
    assert "ended: COMPLETED" in res.stdout, res.stdout + res.stderr
    mine = probe_output(res.stdout)
    unix = lab.unix["alice"]
    assert mine["agent"] == socket.gethostname()  # it ran on the joined agent
    assert (mine["uid"], mine["gid"]) == (unix.pw_uid, unix.pw_gid)
    assert mine["cwd"] == [unix.pw_uid, 0o700] and mine["written"] == [unix.pw_uid, unix.pw_gid]
    victim = lab.open_dir / "shared" / "checkpoints" / mine["checkpoint"]
    assert (victim.stat().st_uid, victim.stat().st_mode & 0o777) == (unix.pw_uid, 0o700)
    exp_id = int(re.findall(r"Experiment (\d+) ended", res.stdout)[-1])
    trial_id = lab.served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]["id"]
    bobs = bob_probe(lab, {
        "VICTIM": str(victim), "VICTIM_SAMPLE": str(lab.served.state_dir / "checkpoints" /
                                                    alice_sample),
        "TOKEN_FILE": str(lab.tmp / "gpu" / "gpu-1.token"),
        "STATE": str(lab.served.state_dir), "ALICE": f"{exp_id} {trial_id} {alice_sample}"})
    check_bobs_trial(lab, bobs, victim)
    check_users_and_the_agent_credential(lab, alice_sample, trial_id)
    admin = login(lab, "admin")  # the admin deletes what others own
    assert lab.api("DELETE", "/api/v1/checkpoints", admin,
                   {"checkpointUuids": [alice_sample]}) == 200
    assert lab.api("DELETE", f"/api/v1/experiments/{exp_id}", admin) == 200


def bob_probe(lab: Lab, env: dict[str, str]) -> dict:
    """bob's probe, queued while no agent takes work: alice's pause and kill are refused
    (with the rule, from the CLI); then it runs on the joined agent to COMPLETED."""
    host = socket.gethostname()
    lab.sh("admin", f"dettui agent disable {host}")
    bob = probe_experiment(lab, "bob", env)
    created = lab.sh("bob", f"dettui e create {bob}/exp.yaml {bob}/ctx").stdout
    exp_id = int(re.findall(r"Created experiment (\d+)", created)[-1])
    for action in ("pause", "kill"):
        res = lab.sh("alice", f"dettui e {action} {exp_id}", check=False)
        assert res.returncode != 0
        assert f"Forbidden: cannot {action} experiment {exp_id}: only the owner of " \
               f"experiment {exp_id} or an admin may change it" in res.stdout + res.stderr
    lab.sh("admin", f"dettui agent enable {host}")
    assert lab.served.wait_experiment(exp_id, 180)["state"] == "STATE_COMPLETED"
    trial = lab.served.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]["id"]
    return probe_output(lab.sh("bob", f"dettui t logs {trial}").stdout)


def check_bobs_trial(lab: Lab, out: dict, victim: Path) -> None:
    unix = lab.unix["bob"]
    assert (out["uid"], out["gid"]) == (unix.pw_uid, unix.pw_gid)
    assert out["agent"] == socket.gethostname()
    assert out["read passwd"] == "DONE"  # what every local user may read
    for attempt in ("list victim", "read victim", "write victim", "move victim",
                    "read sample", "read token file", "read secret.key", "read shadow"):
        assert out[attempt] != "DONE", f"bob's trial could {attempt}: {out}"
    assert (victim / "w.txt").read_text() == "weights" and not (victim / "evil.pt").exists()
    expected = {name: 200 if name in ("token: own trial", "session: alice's checkpoint")
                else 403 for name in out["api"]}
    assert out["api"] == expected
    ckpt = lab.open_dir / "shared" / "checkpoints" / out["checkpoint"]
    assert (ckpt.stat().st_uid, ckpt.stat().st_mode & 0o777) == (unix.pw_uid, 0o700)


def check_users_and_the_agent_credential(lab: Lab, alice_ckpt: str, alice_trial: int) -> None:
    """bob reads and downloads alice's checkpoint through the master but cannot delete it,
    write to her trial, create users or link himself; the agent's credential reaches no user
    route and cannot register as another agent."""
    lab.sh("bob", f"dettui checkpoint download {alice_ckpt} --mode master -o "
                  f"{lab.tmp / 'download'}")
    assert any((lab.tmp / "download").rglob("*")), "bob downloaded alice's checkpoint"
    bob = login(lab, "bob")
    assert lab.api("DELETE", "/api/v1/checkpoints", bob, {"checkpointUuids": [alice_ckpt]}) \
        == 403
    assert lab.api("POST", f"/api/v1/trials/{alice_trial}/metrics", bob, {"metrics": {
        "trialId": alice_trial, "trialRunId": 1, "stepsCompleted": 1,
        "avgMetrics": {"loss": 1.0}}, "group": "training"}) == 403
    for line in ("dettui user create carol --password x", "dettui user link-with-agent-user "
                 "bob --agent-uid 0 --agent-gid 0 --agent-user root --agent-group root"):
        made = lab.sh("bob", line, check=False)
        assert made.returncode != 0 and "admin" in made.stdout + made.stderr, made
    agent = (lab.tmp / "gpu" / "gpu-1.token").read_text().strip()
    for path in ("/api/v1/experiments", "/api/v1/users", f"/api/v1/checkpoints/{alice_ckpt}"):
        assert lab.api("GET", path, agent) == 403, path
    assert lab.api("POST", "/api/v1/agents/register", agent, {
        "id": f"{socket.gethostname()}-local", "slots": [{"id": 0, "type": "cpu"}]}) == 403


def login(lab: Lab, who: str) -> str:
    password = lab.served.password if who == "admin" else PASSWORDS[who]
    body = json.dumps({"username": who, "password": password}).encode()
    req = urllib.request.Request(lab.served.url + "/api/v1/auth/login", data=body,
                                 method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(json.loads(resp.read())["token"])
