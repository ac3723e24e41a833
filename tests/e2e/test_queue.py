"""The queue end to end: reorder, priority preemption, pause/activate, checkpoint GC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE, Served
from tests.poll import until

pytestmark = pytest.mark.slow


@pytest.fixture
def preemptive(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path / "state", tmp_path / "config",
               extra=["--agent-slots", "2", "--preemption"])
    s.start()
    try:
        yield s
    finally:
        s.stop()


def create(s: Served, sleep: float, *extra: str) -> int:
    out = s.cli("e", "create", str(SAMPLE / "single.yaml"), str(SAMPLE), "--config",
                f"hyperparameters.step_sleep={sleep}", *extra).stdout
    return int(out.split("Created experiment ")[1].split()[0])


def jobs(s: Served) -> list[dict]:
    return json.loads(s.cli("job", "list", "--json").stdout)


def trial_of(s: Served, exp_id: int) -> dict:
    return s.api("GET", f"/api/v1/experiments/{exp_id}/trials")["trials"][0]


def test_reorder_then_priority_preempts_and_the_victim_resumes(preemptive: Served) -> None:
    s = preemptive
    # 200 steps of 0.08 s: still running when e3's priority changes, however loaded the box
    # (at 0.04 s, with a second suite on the machine, e2 once ended before it was preempted)
    e1, e2 = create(s, 0.08), create(s, 0.08)
    until(lambda: all(trial_of(s, e)["state"] == "STATE_RUNNING" for e in (e1, e2)),
          "two running trials", timeout=60)
    e3, e4 = create(s, 0.0), create(s, 0.0)
    names = [j["entityId"] for j in jobs(s)]
    assert names == [str(e1), str(e2), str(e3), str(e4)]
    by_entity = {j["entityId"]: j for j in jobs(s)}
    assert by_entity[str(e3)]["summary"]["state"] == "STATE_QUEUED"
    # Reorder: e4 goes ahead of e3 (and takes its priority).
    s.cli("job", "update", by_entity[str(e4)]["jobId"][:8], "--ahead-of",
          by_entity[str(e3)]["jobId"][:8])
    assert [j["entityId"] for j in jobs(s)] == [str(e1), str(e2), str(e4), str(e3)]
    # Priority 1 with preemption on: the newest lower-priority trial (e2's) is preempted.
    s.cli("job", "update", by_entity[str(e3)]["jobId"], "--priority", "1")
    until(lambda: trial_of(s, e3)["state"] in ("STATE_RUNNING", "STATE_COMPLETED"),
          "e3 to start after preempting e2", timeout=60)
    for exp_id in (e1, e2, e3, e4):
        assert s.wait_experiment(exp_id, timeout=180)["state"] == "STATE_COMPLETED"
    victim, untouched = trial_of(s, e2), trial_of(s, e1)
    assert len(victim["allocationIds"]) == 2, "e2 was preempted once and resumed"
    assert len(untouched["allocationIds"]) == 1
    assert victim["totalBatchesProcessed"] == untouched["totalBatchesProcessed"] == 200
    logs = s.cli("t", "logs", str(victim["id"])).stdout
    assert "told to stop at step" in logs and "resumed from checkpoint" in logs
    steps = [m["stepsCompleted"] for m in s.api(
        "GET", f"/api/v1/trials/{victim['id']}/metrics?group=training")["metrics"]]
    assert steps == sorted(set(steps)) and steps[-1] == 200


def test_pause_frees_slots_and_activate_resumes_without_repeating(served: Served) -> None:
    # 150 steps of 0.08 s left after step 50: the pause lands mid-run even when the logs that
    # say "step 50" reach us late (at 0.03 s the trial once finished first, on a loaded box)
    e = create(served, 0.08)
    until(lambda: "step 50:" in served.cli("t", "logs", "1").stdout, "step 50", timeout=60)
    served.cli("e", "pause", str(e))
    until(lambda: trial_of(served, e)["state"] == "STATE_PAUSED", "PAUSED trial", timeout=60)
    exp = served.api("GET", f"/api/v1/experiments/{e}")["experiment"]
    assert exp["state"] == "STATE_PAUSED"
    job = jobs(served)[0]
    assert job["allocatedSlots"] == 0 and job["summary"]["state"] == "STATE_QUEUED"
    tasks = json.loads(served.cli("task", "list", "--json").stdout)
    assert tasks == []
    paused_at = trial_of(served, e)["totalBatchesProcessed"]
    assert 0 < paused_at < 200
    served.cli("e", "activate", str(e))
    assert served.wait_experiment(e, timeout=120)["state"] == "STATE_COMPLETED"
    trial = trial_of(served, e)
    assert trial["totalBatchesProcessed"] == 200
    logs = served.cli("t", "logs", "1").stdout
    assert "resumed from checkpoint" in logs
    steps = [m["stepsCompleted"] for m in served.api(
        "GET", "/api/v1/trials/1/metrics?group=training")["metrics"]]
    assert steps == sorted(set(steps)), "no step was trained twice"


def test_gc_deletes_exactly_what_the_policy_says(served: Served) -> None:
    e = create(served, 0.0)
    served.wait_experiment(e)
    ckpts = served.api("GET", f"/api/v1/experiments/{e}/checkpoints")["checkpoints"]
    base = served.state_dir / "checkpoints"
    vals = {m["stepsCompleted"]: m["metrics"]["avgMetrics"]["validation_loss"] for m in
            served.api("GET", "/api/v1/trials/1/metrics?group=validation")["metrics"]}
    by_steps = {c["metadata"]["steps_completed"]: c for c in ckpts}
    assert set(by_steps) == {100, 200}
    # Default policy (0, 1, 1): the latest (200) stays; 100 stays only if it is the best.
    expect_100 = "STATE_COMPLETED" if vals[100] < vals[200] else "STATE_DELETED"
    assert by_steps[200]["state"] == "STATE_COMPLETED"
    assert by_steps[100]["state"] == expect_100
    assert (base / by_steps[200]["uuid"]).is_dir()
    assert (base / by_steps[100]["uuid"]).is_dir() == (expect_100 == "STATE_COMPLETED")
    preview = served.cli("e", "set", "gc-policy", str(e), "--save-experiment-best", "0",
                         "--save-trial-best", "0", "--save-trial-latest", "0").stdout
    assert by_steps[200]["uuid"] in preview and "Nothing changed" in preview
    assert (base / by_steps[200]["uuid"]).is_dir()
    served.cli("e", "set", "gc-policy", str(e), "--save-experiment-best", "0",
               "--save-trial-best", "0", "--save-trial-latest", "0", "--yes")
    after = served.api("GET", f"/api/v1/experiments/{e}/checkpoints")["checkpoints"]
    assert {c["state"] for c in after} == {"STATE_DELETED"}
    assert not any((base / c["uuid"]).exists() for c in after)
    assert all(c["resources"] == {} for c in after)
    # Archived experiments leave the default lists and keep their data.
    served.cli("e", "archive", str(e))
    assert json.loads(served.cli("e", "list", "--json").stdout) == []
    everything = json.loads(served.cli("e", "list", "--all", "--json").stdout)
    assert [x["id"] for x in everything] == [e] and everything[0]["archived"] is True
    again = served.cli("e", "archive", str(e), check=False)
    assert again.returncode == 1 and "already archived" in again.stderr
    assert served.api("GET", "/api/v1/trials/1/metrics")["metrics"]
    served.cli("e", "unarchive", str(e))
    assert [x["id"] for x in json.loads(served.cli("e", "list", "--json").stdout)] == [e]
    # Deleting asks for --yes when it cannot ask, then removes everything of it.
    unconfirmed = served.cli("e", "delete", str(e), check=False)
    assert unconfirmed.returncode != 0 and "--yes" in unconfirmed.stderr
    assert served.api("GET", "/api/v1/trials/1/metrics")["metrics"], "nothing deleted yet"
    assert f"Deleted experiment {e}" in served.cli("e", "delete", str(e), "--yes").stdout
    assert json.loads(served.cli("e", "list", "--all", "--json").stdout) == []
    gone = served.cli("e", "describe", str(e), check=False)
    assert gone.returncode != 0 and "not found" in gone.stderr.lower()


def test_fair_share_pool_takes_weights_not_priorities(tmp_path: Path) -> None:
    (tmp_path / "master.yaml").write_text(
        "resource_pools:\n  - pool_name: shared\n    scheduler: {type: fair_share}\n")
    s = Served(tmp_path / "state", tmp_path / "config",
               extra=["--config", str(tmp_path / "master.yaml"), "--agent-slots", "2"])
    s.start()
    try:
        e1, e2 = create(s, 0.0, "--paused"), create(s, 0.0, "--paused")
        listed = s.cli("job", "list").stdout
        assert "Job queue: shared" in listed and "Weight" in listed and "N/A" in listed
        job = jobs(s)[0]
        refused = s.cli("job", "update", job["jobId"], "--priority", "3", check=False)
        assert refused.returncode == 1
        assert "uses the fair share scheduler: set a weight" in refused.stderr
        ahead = s.cli("job", "update", job["jobId"], "--ahead-of", jobs(s)[1]["jobId"],
                      check=False)
        assert ahead.returncode == 1 and "need the priority scheduler" in ahead.stderr
        s.cli("job", "update", job["jobId"], "--weight", "3")
        assert jobs(s)[0]["weight"] == 3.0
        for e in (e1, e2):
            s.cli("e", "activate", str(e))
        for e in (e1, e2):
            assert s.wait_experiment(e, timeout=120)["state"] == "STATE_COMPLETED"
    finally:
        s.stop()
