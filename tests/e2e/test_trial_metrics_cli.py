"""`dettui trial metrics`, `dettui job list`'s why and `dettui trial describe`'s resources
against a real `dettui serve` (issue 33, items 4-6): metrics reported through the API by the
trial's own allocation (a registered agent's start), not by training."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import urllib.request

import pytest

from tests.conftest import Served


def running_trial(s: Served) -> tuple[int, str]:
    """A trial of a new experiment started on an agent registered through the API (it runs
    nothing and holds its one slot): its id and its allocation's token."""
    trial_id, token, _ = started(s)
    return trial_id, token


def started(s: Served) -> tuple[int, str, dict[str, object]]:
    """`running_trial`, and the agent's start work item, with the agent's token."""
    s.api("POST", "/api/v1/experiments", {"config": "name: m\nentrypoint: python3 train.py\n"
                                          "searcher: {name: single, metric: loss}\n",
                                          "activate": True, "modelDefinition": []})
    agent = s.agent_token("metrics")
    register = urllib.request.Request(
        s.url + "/api/v1/agents/register", method="POST",
        data=json.dumps({"id": "fake", "slots": [{"id": 0, "type": "cpu"}]}).encode(),
        headers={"Authorization": f"Bearer {agent}"})
    urllib.request.urlopen(register, timeout=10).read()
    for _ in range(50):
        poll = urllib.request.Request(s.url + "/api/v1/agents/fake/work?timeout_seconds=0.2",
                                      headers={"Authorization": f"Bearer {agent}"})
        with urllib.request.urlopen(poll, timeout=10) as resp:
            work = json.loads(resp.read())["work"]
        if work:
            return (int(work[0]["trialId"]), str(work[0]["sessionToken"]),
                    work[0] | {"agentToken": agent})
    raise AssertionError("no work for the agent")


def report(s: Served, trial_id: int, token: str, group: str,
           rows: list[tuple[int, dict[str, object]]]) -> None:
    for at in range(0, len(rows), 5000):
        body = {"reports": [{"group": group, "metrics": {
            "trialId": trial_id, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": avg}}} for steps, avg in rows[at:at + 5000]]}
        req = urllib.request.Request(
            f"{s.url}/api/v1/trials/{trial_id}/metrics/batch", data=json.dumps(body).encode(),
            method="POST", headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert json.loads(resp.read())["refused"] == []


N = 300  # training reports, at steps 0 to N-1; validations at every third steps


def validation(steps: int) -> dict[str, object]:
    """A validation's metrics: `acc` only at even steps, and a NaN loss at steps 3."""
    return {"val_loss": "NaN" if steps == 3 else steps / 1000} | (
        {"acc": steps / 2000} if steps % 2 == 0 else {})


@pytest.fixture
def reported(headless: Served) -> tuple[Served, int]:
    trial_id, token = running_trial(headless)
    report(headless, trial_id, token, "training",
           [(i, {"loss": 1 / (i + 1), "lr": 0.01}) for i in range(N)])
    report(headless, trial_id, token, "validation",
           [(i, validation(i)) for i in range(0, N, 3)])
    return headless, trial_id


def test_pages_go_on_inside_a_steps_and_lose_or_repeat_no_report(
        reported: tuple[Served, int]) -> None:
    """The client's walk of a history by steps, with pages of 7, 8 and 9 reports of both
    groups (a training and a validation report at every third steps: pages end inside a
    steps), and of one group: every report comes once, in steps order."""
    from dettui.client import Client

    s, trial_id = reported
    both = sorted([(i, "training") for i in range(N)] +
                  [(i, "validation") for i in range(0, N, 3)])

    async def walk(size: int, group: str | None) -> list[list[dict[str, object]]]:
        c = Client(s.url, token=s.token())
        try:
            return [p async for p in c.metric_pages(trial_id, group, page_size=size)]
        finally:
            await c.close()

    for size in (7, 8, 9):
        for group, want in ((None, both), ("validation", [r for r in both if r[1] != "training"])):
            pages = asyncio.run(walk(size, group))
            assert all(len(p) == size for p in pages[:-1])
            assert [(r["stepsCompleted"], r["group"]) for p in pages for r in p] == want, size


def test_trial_metrics_as_csv_json_lines_and_a_table(reported: tuple[Served, int]) -> None:
    s, trial_id = reported
    res = s.cli("trial", "metrics", str(trial_id), "--csv")
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["steps", "time", "loss", "lr"]
    assert [(int(r[0]), float(r[2]), r[3]) for r in rows[1:]] == [
        (i, 1 / (i + 1), "0.01") for i in range(N)]
    assert all(r[1].endswith("Z") for r in rows[1:]) and res.stderr == ""

    lines = s.cli("t", "metrics", str(trial_id), "--json", "--group", "validation").stdout
    got = [json.loads(line) for line in lines.splitlines()]
    assert [(g["steps"], g["group"], g["metrics"]) for g in got] == [
        (i, "validation", validation(i)) for i in range(0, N, 3)]

    table = s.cli("trial", "metrics", str(trial_id), "--group", "validation")
    head, rule, *body = table.stdout.splitlines()
    assert head.split() == ["Steps", "Time", "val_loss", "acc"]
    assert set(rule) <= {"─", " "} and len(body) == N // 3
    assert body[0].split()[0] == "0" and body[0].split()[-2:] == ["0", "0"]
    assert body[1].split()[0] == "3" and body[1].split()[-1] == "NaN"  # no acc: blank
    assert body[2].split()[-2:] == ["0.006", "0.003"]
    assert table.stderr.strip() == ""


def test_trial_metrics_says_when_there_are_none_and_when_the_trial_is_unknown(
        headless: Served) -> None:
    trial_id, _ = running_trial(headless)
    none = headless.cli("trial", "metrics", str(trial_id), "--group", "validation")
    assert none.stdout == "" and f"Trial {trial_id} has no validation metrics" in none.stderr
    unknown = headless.cli("trial", "metrics", "999", check=False)
    assert unknown.returncode == 1 and "999" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    both = headless.cli("trial", "metrics", str(trial_id), "--csv", "--json", check=False)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_job_list_says_why_a_job_waits(headless: Served) -> None:
    running_trial(headless)  # holds the only slot
    headless.api("POST", "/api/v1/experiments", {
        "config": "name: second\nentrypoint: python3 train.py\n"
                  "searcher: {name: single, metric: loss}\n",
        "activate": True, "modelDefinition": []})
    for _ in range(100):
        out = headless.cli("job", "list").stdout
        if "pool default full: 1 of 1 slots in use" in out:
            break
    head = next(line for line in out.splitlines() if "Why waiting" in line)
    row = next(line for line in out.splitlines() if "second" in line)
    assert row.index("pool default full") == head.index("Why waiting"), out
    jobs = json.loads(headless.cli("job", "list", "--json").stdout)
    assert {j["name"]: j["waitReason"] for j in jobs} == {
        "m": None, "second": "pool default full: 1 of 1 slots in use"}


def test_a_metric_first_reported_after_the_first_page_is_named_not_lost_silently() -> None:
    """The CSV's and table's columns are the first page's (a history is written as it is
    read): a metric first seen later is named, to read it with --json."""
    from dettui.commands.trial import MetricWriter

    def rep(steps: int, avg: dict[str, object]) -> dict[str, object]:
        return {"stepsCompleted": steps, "reportTime": "2026-11-22T12:00:00Z",
                "group": "training", "metrics": {"avgMetrics": avg}}

    out = io.StringIO()
    writer = MetricWriter("csv", out)
    writer.page([rep(1, {"loss": 0.5}), rep(2, {"loss": 0.25})])
    writer.page([rep(3, {"loss": 0.125, "late": 1.0, "\x1b[31mred": 2.0})])
    assert out.getvalue().splitlines() == [
        "steps,time,loss", "1,2026-11-22T12:00:00Z,0.5", "2,2026-11-22T12:00:00Z,0.25",
        "3,2026-11-22T12:00:00Z,0.125"]
    assert list(writer.left_out) == ["late", "\x1b[31mred"] and writer.first_rows == 2
    table = io.StringIO()
    writer = MetricWriter("table", table)
    writer.page([rep(10, {"\x1b[31mred[/]": 0.1234567, "text": "a\x1b[2Jb"})])
    assert "\x1b" not in table.getvalue()
    assert table.getvalue().splitlines()[2].split() == [
        "10", "2026-11-22", "12:00:00", "0.123457", "a\ufffd[2Jb"]


RESOURCES = {"cpuPercent": 97.0, "rssBytes": 300 * 2**20, "gpuUtil": None,
             "gpuMemoryBytes": None, "sampledAt": "2026-11-22T12:00:05Z",
             "history": {"cpuPercent": [0.0, 50.0, 100.0, 97.0],
                         "rssBytes": [100 * 2**20, 200 * 2**20, 300 * 2**20, 300 * 2**20]}}


def test_the_resources_a_trial_uses_in_words_and_sparklines() -> None:
    from dettui.commands.trial import resource_rows

    assert resource_rows(RESOURCES) == [
        ("CPU", "97.0 %", "▁▄██"), ("Memory (RSS)", "300.0 MiB", "▃▅██"),
        ("GPU utilisation", "n/a (no GPU)", ""), ("GPU memory", "n/a (no GPU)", "")]
    gpu = RESOURCES | {"gpuUtil": 93.5, "gpuMemoryBytes": 31 * 2**30, "cpuPercent": 390.0,
                       "history": {"cpuPercent": [400.0, 200.0], "rssBytes": "bad"}}
    assert resource_rows(gpu) == [
        ("CPU", "390.0 %", "█▄"), ("Memory (RSS)", "300.0 MiB", ""),
        ("GPU utilisation", "93.5 %", ""), ("GPU memory", "31.0 GiB", "")]
    hostile = {"cpuPercent": "NaN", "rssBytes": True, "history": [1, 2]}
    assert [r[1] for r in resource_rows(hostile)] == ["?", "?", "n/a (no GPU)", "n/a (no GPU)"]


class StandIn:
    """The master's answer to GET /api/v1/trials/7, with the `resources` a running trial's
    agents sampled (or without, as a master before them sends)."""

    def __init__(self, resources: dict[str, object] | None) -> None:
        self.resources = resources

    async def trial(self, trial_id: int) -> dict[str, object]:
        t: dict[str, object] = {"id": trial_id, "experimentId": 3, "state": "STATE_RUNNING",
                                "totalBatchesProcessed": 250, "restarts": 0,
                                "hparams": {"lr": 0.01}, "latestValidation": None}
        return t | ({"resources": self.resources} if self.resources is not None else {})

    async def trial_log_search(self, trial_id: int, text: str, *, limit: int = 100,
                               newest: bool = False) -> list[dict[str, object]]:
        return [{"log": f"{text}forked by fork server 81 in 3 ms\n"}]


@pytest.mark.parametrize("with_resources", [True, False])
def test_trial_describe_prints_the_resources_when_the_master_has_them(
        with_resources: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from typing import Any, cast

    from dettui.commands import trial

    asyncio.run(trial.describe(cast(Any, StandIn(RESOURCES if with_resources else None)), 7,
                               as_json=False))
    out = capsys.readouterr().out
    assert "Trial 7" in out and "RUNNING" in out
    assert "Started: forked by fork server 81 in 3 ms" in out
    if not with_resources:
        assert "Resources" not in out
        return
    assert "Resources of trial 7, sampled 2026-11-22 12:00:05" in out
    rows = {line.split("│")[1].strip(): line.split("│")[2:4] for line in out.splitlines()
            if line.count("│") >= 4}
    assert [c.strip() for c in rows["CPU"]] == ["97.0 %", "▁▄██"]
    assert [c.strip() for c in rows["Memory (RSS)"]] == ["300.0 MiB", "▃▅██"]
    assert rows["GPU memory"][0].strip() == "n/a (no GPU)"


def test_trial_describe_shows_what_the_agent_sampled(headless: Served) -> None:
    """Against the real master: the agent's heartbeats carry its allocation's samples, and
    `dettui trial describe` prints them."""
    trial_id, _, work = started(headless)
    for i, cpu in enumerate((50.0, 100.0, 150.0)):
        beat = urllib.request.Request(
            headless.url + "/api/v1/agents/fake/heartbeat", method="POST",
            data=json.dumps({"runningAllocations": [work["allocationId"]], "samples": [
                {"time": 1e9 + i, "allocations": {work["allocationId"]: {
                    "cpuPercent": cpu, "rss": 64 * 2**20}}}]}).encode(),
            headers={"Authorization": f"Bearer {work['agentToken']}"})
        urllib.request.urlopen(beat, timeout=10).read()
    out = headless.cli("trial", "describe", str(trial_id)).stdout
    assert f"Resources of trial {trial_id}, sampled 20" in out, out
    cpu = next(line for line in out.splitlines() if "│ CPU" in line)
    assert "150.0 %" in cpu and "▃▅█" in cpu, out
    assert "64.0 MiB" in out and "n/a (no GPU)" in out


def test_csv_cells_a_spreadsheet_would_run_are_quoted() -> None:
    """A metric named `=cmd|' /C calc'!A0` or a value `=HYPERLINK(...)` was written as it is:
    opened in a spreadsheet, a formula. Such cells start with `'`; numbers stay numbers."""
    from dettui.commands.trial import MetricWriter

    out = io.StringIO()
    writer = MetricWriter("csv", out)
    writer.page([{"stepsCompleted": 1, "reportTime": "2026-11-22T12:00:00Z", "group": "training",
                  "metrics": {"avgMetrics": {"=cmd|' /C calc'!A0": -1.5, "+SUM(1,2)": 2,
                                             "@x": '=HYPERLINK("http://x")'}}}])
    header, row = list(csv.reader(io.StringIO(out.getvalue())))
    assert header == ["steps", "time", "'=cmd|' /C calc'!A0", "'+SUM(1,2)", "'@x"]
    assert row == ["1", "2026-11-22T12:00:00Z", "-1.5", "2", "'=HYPERLINK(\"http://x\")"]
