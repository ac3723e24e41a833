"""The WebSocket push stream: a snapshot, then only what changed; bad input never kills it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import pytest

from dettui import errors
from dettui.client import Client
from dettui.master.http import appkeys
from dettui.master.routes import stream as stream_routes
from dettui.master.store import exits
from dettui.master.views import feeds
from tests.master.conftest import Api, agent_headers, allocate
from tests.master.test_api import create
from tests.poll import until_async

QUICK = 3.0  # seconds: well under the stream's idle re-read, so a diff must come from a signal


class Inbox:
    """A stream socket whose messages are taken by topic (other topics wait their turn)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.kept: list[dict[str, Any]] = []

    async def send(self, body: Any) -> None:
        await self.ws.send_json(body)

    async def next(self, topic: str | None = None, timeout: float = QUICK) -> dict[str, Any]:
        """The next message of `topic` (None: the next message without a topic)."""
        deadline = time.monotonic() + timeout
        while True:
            for msg in self.kept:
                if msg.get("topic") == topic:
                    self.kept.remove(msg)
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no message for {topic!r}; got {self.kept}")
            try:
                self.kept.append(dict(await self.ws.receive_json(timeout=left)))
            except TimeoutError:
                continue

    async def quiet(self, topic: str, seconds: float = 0.5) -> None:
        """Nothing arrives for `topic` for a while: 0.5 s is five times the longest a feed
        holds a change (COALESCE), room for a read on a loaded box; shorter proves less."""
        with pytest.raises(AssertionError, match="no message"):
            await self.next(topic, seconds)

    async def settle(self, topic: str, key: str, seconds: float = 0.4) -> list[dict[str, Any]]:
        """Apply the topic's messages as a client would until it goes quiet for `seconds`;
        return the objects in order (the first message must be the snapshot)."""
        objs: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        first = True
        while True:
            try:
                msg = await self.next(topic, QUICK if first else seconds)
            except AssertionError:
                return [objs[k] for k in order]
            assert msg["kind"] == ("snapshot" if first else "diff"), msg
            first = False
            for obj in msg["upsert"]:
                objs[str(obj[key])] = obj
            for gone in msg["remove"]:
                objs.pop(gone)
            order = msg["order"] if msg["order"] is not None else [
                k for k in order if k in objs]
            assert sorted(order) == sorted(objs), msg


async def connect(api: Api, *topics: str) -> Inbox:
    inbox = Inbox(await api.client.ws_connect("/api/v1/stream", headers=api.headers()))
    if topics:
        await inbox.send({"subscribe": list(topics)})
    return inbox


async def move(api: Api, job: str, **change: Any) -> None:
    update = {"jobId": job, "priority": None, "weight": None, "resourcePool": None} | change
    await api.call("POST", "/api/v1/job-queues", {"updates": [update]})


async def test_a_snapshot_then_a_diff_when_an_experiment_is_created(api: Api) -> None:
    first = (await create(api))["experiment"]
    inbox = await connect(api, "jobs", "experiments")
    jobs = await inbox.settle("jobs", "jobId")
    rest = (await api.call("GET", "/api/v1/job-queues-v2"))["jobs"]
    assert jobs == [j["full"] for j in rest]  # the REST objects, exactly
    exps = await inbox.next("experiments")  # the REST list's objects without configs
    lean = await api.call("GET", "/api/v1/experiments?omitConfig=true")
    assert exps["upsert"] == lean["experiments"]
    assert "config" not in exps["upsert"][0] and "originalConfig" not in exps["upsert"][0]
    assert exps["order"] == [str(first["id"])]
    second = (await create(api))["experiment"]
    diff = await inbox.next("experiments")
    assert diff["kind"] == "diff" and [e["id"] for e in diff["upsert"]] == [second["id"]]
    assert diff["order"] == [str(first["id"]), str(second["id"])] and diff["remove"] == []
    diff = await inbox.next("jobs")
    assert [j["jobId"] for j in diff["upsert"]] == [second["jobId"]]
    assert diff["order"] == [first["jobId"], second["jobId"]]


async def test_a_priority_change_sends_only_the_changed_jobs_and_new_order(api: Api) -> None:
    ids = [(await create(api))["experiment"]["jobId"] for _ in range(3)]
    inbox = await connect(api, "jobs")
    assert [j["jobId"] for j in await inbox.settle("jobs", "jobId")] == ids
    await move(api, ids[2], priority=50)  # less urgent: it stays last
    diff = await inbox.next("jobs")
    assert [(j["jobId"], j["priority"]) for j in diff["upsert"]] == [(ids[2], 50)]
    assert diff["order"] is None and diff["remove"] == []
    await move(api, ids[2], priority=10)  # most urgent: first; the others' jobsAhead change
    diff = await inbox.next("jobs")
    assert diff["order"] == [ids[2], ids[0], ids[1]]
    ahead = {j["jobId"]: j["summary"]["jobsAhead"] for j in diff["upsert"]}
    assert ahead == {ids[2]: 0, ids[0]: 1, ids[1]: 2}
    await inbox.quiet("jobs")


async def test_a_burst_of_changes_is_coalesced(api: Api) -> None:
    job = (await create(api))["experiment"]["jobId"]
    inbox = await connect(api, "jobs")
    await inbox.settle("jobs", "jobId")
    for priority in range(20, 40):
        await move(api, job, priority=priority)
    seen = []
    while not seen or seen[-1] != 39:
        seen.append((await inbox.next("jobs"))["upsert"][0]["priority"])
    assert len(seen) < 20, seen
    await inbox.quiet("jobs")


async def test_archived_experiments_are_in_the_experiments_topic(api: Api) -> None:
    exp = (await create(api))["experiment"]
    await api.call("POST", f"/api/v1/experiments/{exp['id']}/kill")
    await api.call("POST", f"/api/v1/experiments/{exp['id']}/archive")
    inbox = await connect(api, "experiments")
    snap = await inbox.next("experiments")
    assert [(e["id"], e["archived"]) for e in snap["upsert"]] == [(exp["id"], True)]


async def test_the_trials_of_an_experiment(api: Api) -> None:
    exp = (await create(api))["experiment"]
    topic = f"experiment:{exp['id']}"
    inbox = await connect(api, topic)
    snap = await inbox.next(topic)
    rest = (await api.call("GET", f"/api/v1/experiments/{exp['id']}/trials"))["trials"]
    assert snap["upsert"] == rest and snap["order"] == [str(rest[0]["id"])]
    trial = rest[0]["id"]
    alloc, token = await allocate(api, trial)  # its reports come from its allocation
    await api.call("POST", f"/api/v1/trials/{trial}/metrics", {"group": "training", "metrics": {
        "trialId": trial, "trialRunId": alloc.run_id, "stepsCompleted": 5,
        "metrics": {"avgMetrics": {"loss": 0.5}}}},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {token}"})
    diff = await inbox.next(topic)
    assert diff["upsert"][0]["latestTraining"]["totalBatches"] == 5
    cluster = api.client.server.app[appkeys.CLUSTER]
    await cluster.dispatcher.run(exits.end, alloc.id, None, "lost", "lost")  # queued again
    await api.call("POST", f"/api/v1/experiments/{exp['id']}/pause")
    while (diff := await inbox.next(topic))["upsert"][0]["state"] != "STATE_PAUSED":
        pass
    assert diff["order"] is None


async def test_an_unknown_experiment_is_an_error_of_its_topic(api: Api) -> None:
    inbox = await connect(api, "experiment:99")
    msg = await inbox.next("experiment:99")
    assert "not found" in msg["error"] and "kind" not in msg
    exp = (await create(api))["experiment"]  # the socket is still good
    await inbox.send({"subscribe": [f"experiment:{exp['id']}"]})
    assert (await inbox.next(f"experiment:{exp['id']}"))["kind"] == "snapshot"


@pytest.mark.parametrize(("raw", "error"), [
    ("{not json", "malformed message: not JSON"),
    ('["jobs"]', "malformed message: expected an object"),
    ('{"subscribe": 5}', "malformed message: subscribe: expected a list of topic names"),
    ('{"subscribe": ["jobs", 7]}', "malformed message: subscribe: expected a list"),
    ('{"hello": 1}', 'malformed message: expected "subscribe" or "unsubscribe"'),
    ('{"subscribe": ["nonsense"]}', "unknown topic 'nonsense'"),
    ('{"subscribe": ["experiment:x"]}', "unknown topic 'experiment:x'"),
])
async def test_bad_messages_get_an_error_and_the_socket_stays(api: Api, raw: str,
                                                               error: str) -> None:
    inbox = await connect(api)
    await inbox.ws.send_str(raw)
    msg = await inbox.next(None)
    assert msg["error"].startswith(error) and set(msg) == {"error"}
    await inbox.ws.send_bytes(b"\x00\x01")
    assert "text frames" in (await inbox.next(None))["error"]
    await inbox.send({"subscribe": "jobs"})  # a bare topic name is fine too
    assert (await inbox.next("jobs"))["kind"] == "snapshot"
    assert (await api.call("GET", "/info", headers={}))["version"]


async def test_unsubscribe_stops_a_topic_and_subscribe_again_resends_a_snapshot(
        api: Api) -> None:
    exp = (await create(api))["experiment"]
    inbox = await connect(api, "jobs", "experiments")
    await inbox.settle("jobs", "jobId")
    await inbox.settle("experiments", "id")
    await inbox.send({"unsubscribe": ["jobs"]})
    (conn,) = api.client.app[feeds.STREAMS]
    await until_async(lambda: "jobs" not in conn.topics, "the jobs topic dropped", timeout=QUICK)
    await move(api, exp["jobId"], priority=7)  # the queue changed: no jobs message now
    await api.call("PATCH", f"/api/v1/experiments/{exp['id']}", {"description": "followed"})
    assert (await inbox.next("experiments"))["kind"] == "diff"  # still followed
    await inbox.quiet("jobs")
    await inbox.send({"subscribe": ["experiments"]})
    assert (await inbox.next("experiments"))["kind"] == "snapshot"


async def test_the_stream_needs_a_token(api: Api) -> None:
    resp = await api.client.get("/api/v1/stream")
    assert resp.status == 401
    assert (await resp.json())["error"]["reason"] == "Unauthenticated"
    with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
        await api.client.ws_connect("/api/v1/stream", headers=api.headers("nope"))
    assert caught.value.status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await api.client.ws_connect("/api/v1/stream?token=nope")
    # Clients that cannot set headers pass the token in the query (only on this path).
    ws = await api.client.ws_connect(f"/api/v1/stream?token={api.token}")
    await ws.send_json({"subscribe": ["jobs"]})
    assert (await ws.receive_json(timeout=QUICK))["kind"] == "snapshot"
    await ws.close()
    await api.call("GET", f"/api/v1/experiments?token={api.token}", headers={}, status=401)


async def test_a_plain_get_is_told_to_use_a_websocket(api: Api) -> None:
    body = await api.call("GET", "/api/v1/stream", status=400)
    assert "WebSocket" in body["message"]


async def test_closing_the_socket_ends_its_tasks(api: Api) -> None:
    await create(api)
    app = api.client.app
    notifier = app[appkeys.NOTIFIER]
    inbox = await connect(api, "jobs", "experiments", "agents", "experiment:1")
    for topic in ("jobs", "experiments", "agents", "experiment:1"):
        await inbox.next(topic)
    (conn,) = app[feeds.STREAMS]
    assert conn.topics == {"jobs", "experiments", "agents", "experiment:1"}
    tasks = [feed.task for feed in app[feeds.FEEDS].values()]
    assert len(tasks) == 4 and notifier.watched() >= {"jobs", "experiments", "agents"}
    await inbox.ws.close()
    await until_async(lambda: (app[feeds.STREAMS], notifier.watched(), app[feeds.FEEDS]),
                      "no stream, watch or feed left", timeout=QUICK,
                      done=lambda left: not any(left))
    assert all(t.done() for t in tasks)


async def test_shutdown_closes_open_streams(api: Api) -> None:
    inbox = await connect(api, "jobs")
    await inbox.next("jobs")
    await stream_routes.close_all(api.client.app)
    msg = await inbox.ws.receive(timeout=QUICK)
    assert msg.type is aiohttp.WSMsgType.CLOSE
    assert msg.data == aiohttp.WSCloseCode.GOING_AWAY


# --- agents and their telemetry ----------------------------------------------------------


def sample(when: float, cpu: float) -> dict[str, Any]:
    return {"time": when, "cpuPercent": cpu, "memUsed": 50, "memTotal": 200,
            "gpus": [{"index": 0, "name": "A100", "util": 90.0, "memUsed": 1, "memTotal": 2,
                      "temperature": 60.0, "power": 250.0, "processes": None}],
            "allocations": {"a1": {"cpuPercent": 150.0, "rss": 2**20}}}


async def test_heartbeats_carry_telemetry_with_a_bounded_history(api: Api) -> None:
    creds = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "box", "slots": [{"id": 0, "type": "cuda"}], "hostname": "box"},
                   headers=creds)
    inbox = await connect(api, "agents")
    snap = await inbox.next("agents")
    assert [(a["id"], a["telemetry"], a["noGpuReason"]) for a in snap["upsert"]] == [
        ("box", None, None)]
    assert snap["upsert"][0]["slotStats"]["typeStats"] == {  # `det agent list` needs it
        "TYPE_CUDA": {"disabled": 0, "draining": 0, "total": 1, "states": {}}}
    for beat in range(70):  # two samples a heartbeat: 140 samples, 120 kept
        samples = [sample(1000.0 + 2 * beat + i, float(beat)) for i in range(2)]
        await api.call("POST", "/api/v1/agents/box/heartbeat",
                       {"runningAllocations": [], "telemetry": samples[-1],
                        "samples": samples}, headers=creds)
    agent = (await api.call("GET", "/api/v1/agents"))["agents"][0]
    tel = agent["telemetry"]
    assert {k: v for k, v in tel.items() if k != "history"} == sample(1139.0, 69.0)
    history = tel["history"]
    assert history["time"] == [1000.0 + i for i in range(20, 140)]
    assert history["cpu"][0] == 10.0 and history["cpu"][-1] == 69.0
    assert history["mem"] == [25.0] * 120 and history["gpuUtil"] == {"0": [90.0] * 120}
    diff = await inbox.next("agents")
    assert diff["kind"] == "diff" and diff["upsert"][0]["telemetry"]["cpuPercent"] >= 0
    assert diff["order"] is None


async def test_bad_telemetry_is_dropped_but_the_heartbeat_counts(api: Api) -> None:
    creds = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "cpu-box", "slots": [{"id": 0}], "hostname": "cpu-box",
                    "noGpuReason": "no NVIDIA GPU found (NVMLError_LibraryNotFound)"},
                   headers=creds)
    await api.call("POST", "/api/v1/agents/cpu-box/heartbeat",
                   {"samples": [{"time": "soon"}, {"cpuPercent": 1}, "x",
                                {"time": 5.0, "gpus": "many"},
                                {"time": 6.0, "cpuPercent": 12.5}]}, headers=creds)
    agent = (await api.call("GET", "/api/v1/agents"))["agents"][0]
    assert agent["noGpuReason"].startswith("no NVIDIA GPU found")
    assert agent["telemetry"]["cpuPercent"] == 12.5
    assert agent["telemetry"]["history"] == {"time": [6.0], "cpu": [12.5], "mem": [None],
                                             "gpuUtil": {}}
    # What the agent was sent before is not taken twice; a clock gone far back starts over.
    await api.call("POST", "/api/v1/agents/cpu-box/heartbeat",
                   {"samples": [{"time": 6.0, "cpuPercent": 99}, {"time": 7.0}]},
                   headers=creds)
    await api.call("POST", "/api/v1/agents/cpu-box/heartbeat", {"samples": [{"time": 1.0}]},
                   headers=creds)
    history = (await api.call("GET", "/api/v1/agents"))["agents"][0]["telemetry"]["history"]
    assert history["time"] == [6.0, 7.0]
    await api.call("POST", "/api/v1/agents/cpu-box/heartbeat",
                   {"samples": [{"time": -100.0}]}, headers=creds)
    history = (await api.call("GET", "/api/v1/agents"))["agents"][0]["telemetry"]["history"]
    assert history["time"] == [-100.0]


# --- the client ----------------------------------------------------------------------------


async def test_the_client_streams_and_raises_typed_errors(api: Api) -> None:
    exp = (await create(api))["experiment"]
    await (await connect(api, "jobs")).settle("jobs", "jobId")  # the scheduler has been by
    url = str(api.client.make_url("")).rstrip("/")
    async with Client(url, api.token) as client:
        messages = client.stream(["jobs", "nonsense"])
        got = [await anext(messages), await anext(messages)]
        assert {"error": "unknown topic 'nonsense'"} in got
        (snap,) = [m for m in got if m.get("topic") == "jobs"]
        assert snap["order"] == [exp["jobId"]]
        await move(api, exp["jobId"], priority=3)
        diff = await asyncio.wait_for(anext(messages), QUICK)
        assert diff["upsert"][0]["priority"] == 3
        await messages.aclose()
    async with Client(url, "nope") as client:
        with pytest.raises(errors.Unauthenticated):
            await anext(client.stream(["jobs"]))
    async with Client("http://127.0.0.1:9", api.token) as client:
        with pytest.raises(errors.MasterUnreachable):
            await anext(client.stream(["jobs"]))


async def test_subscribers_share_one_reader_and_see_the_same_diffs(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """However many clients follow a topic, it is read once per change, and every client gets
    the same diff text."""
    from dettui.master.views import experiments as exp_views

    reads: list[list[int] | None] = []
    real = exp_views.experiment_objects

    async def counted(db: Any, ids: list[int] | None = None) -> Any:
        reads.append(ids)
        return await real(db, ids)

    monkeypatch.setattr(exp_views, "experiment_objects", counted)
    await create(api)
    inboxes = [await connect(api, "experiments") for _ in range(5)]
    snapshots = [await inbox.next("experiments") for inbox in inboxes]
    assert all(s == snapshots[0] for s in snapshots) and snapshots[0]["kind"] == "snapshot"
    assert reads == [None]  # one full read served all five
    await api.call("PATCH", "/api/v1/experiments/1", {"description": "shared"})
    diffs = [await inbox.next("experiments") for inbox in inboxes]
    assert all(d == diffs[0] for d in diffs)
    assert [o["description"] for o in diffs[0]["upsert"]] == ["shared"]
    assert reads[1:] == [[1]]  # the change named its experiment: only that one is re-read
    await create(api)  # a new experiment: it is added, and the order now has both
    diffs = [await inbox.next("experiments") for inbox in inboxes]
    assert all(d == diffs[0] for d in diffs)
    assert [o["id"] for o in diffs[0]["upsert"]] == [2] and diffs[0]["order"] == ["1", "2"]
    assert len(reads) == 3
    for inbox in inboxes:
        await inbox.ws.close()


async def test_a_feed_reads_on_the_feeds_reader_not_the_pages_one(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic's re-reads go to the feeds' reader thread; a page asked over REST meanwhile
    goes to the other (it never waits in line behind a feed's read)."""
    import threading

    from dettui.master.store import experiments as exp_store

    threads: list[str] = []
    real = exp_store.page_ids  # the stream's window and the REST page both read their ids

    def recorded(conn: Any, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(exp_store, "page_ids", recorded)
    await create(api)
    inbox = await connect(api, "experiments?limit=5")
    await inbox.next("experiments?limit=5")
    await api.call("GET", "/api/v1/experiments")
    if api.client.app[appkeys.DB].readers:
        assert [t.rsplit("_", 1)[0] for t in threads] == ["dettui-feeds", "dettui-reader"]
    else:  # PostgreSQL: every read goes to the store thread, as its writes do
        assert [t.rsplit("_", 1)[0] for t in threads] == ["dettui-store"] * 2
    await inbox.ws.close()


async def test_the_newest_experiments_window_rereads_only_what_changed(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """`experiments?limit=2`: the newest two with the list's total; a change to one of them
    re-reads that one only (never the page), a change to an older one nothing; a new
    experiment enters the window, read alone, and the oldest leaves it; a deleted one moves
    the window (a whole read)."""
    from dettui.master.store import experiments as exp_store

    pages: list[object] = []
    real = exp_store.listed_page

    def counted(conn: Any, want: Any) -> Any:
        pages.append(want)
        return real(conn, want)

    monkeypatch.setattr(exp_store, "listed_page", counted)
    for _ in range(3):
        await create(api)
    inbox = await connect(api, "experiments?limit=2")
    snap = await inbox.next("experiments?limit=2")
    assert snap["order"] == ["3", "2"] and snap["total"] == 3 and len(pages) == 1
    await api.call("PATCH", "/api/v1/experiments/3", {"description": "renamed"})
    diff = await inbox.next("experiments?limit=2")
    assert [(o["id"], o["description"]) for o in diff["upsert"]] == [(3, "renamed")]
    assert diff["remove"] == [] and diff["order"] is None and diff["total"] == 3
    assert len(pages) == 1, "a change inside the window re-read the whole window"
    await api.call("PATCH", "/api/v1/experiments/1", {"description": "unseen"})
    await inbox.quiet("experiments?limit=2")  # older than the window: nothing read or sent
    assert len(pages) == 1, "a change outside the window re-read the window"
    await create(api)  # experiment 4: enters the window, 2 leaves it
    diff = await inbox.next("experiments?limit=2")
    assert [o["id"] for o in diff["upsert"]] == [4] and diff["remove"] == ["2"]
    assert diff["order"] == ["4", "3"] and diff["total"] == 4
    assert len(pages) == 1, "a new experiment re-read the whole window"
    await create(api)
    await create(api)  # two at once (or one by one): both enter, 3 and 4 leave
    objs: dict[str, dict[str, Any]] = {}
    while diff["order"] != ["6", "5"]:
        diff = await inbox.next("experiments?limit=2")
        objs.update((str(o["id"]), o) for o in diff["upsert"])
    assert sorted(objs) == ["5", "6"] and diff["total"] == 6 and len(pages) == 1
    await inbox.quiet("experiments?limit=2")
    await api.call("POST", "/api/v1/experiments/6/kill")
    await until_async(lambda: api.call("GET", "/api/v1/experiments/6"), "experiment 6 canceled",
                      timeout=10, done=lambda got: got["experiment"]["state"] == "STATE_CANCELED")
    await api.call("DELETE", "/api/v1/experiments/6")  # leaves the window: 4 comes back
    while diff["order"] != ["5", "4"]:
        diff = await inbox.next("experiments?limit=2")
    assert diff["total"] == 5 and diff["remove"] == ["6"] and len(pages) > 1
    await inbox.ws.close()


async def test_a_metric_report_updates_its_trial_in_the_trials_topic(
        api: Api) -> None:
    await create(api)
    inbox = await connect(api, "experiment:1")
    objs = await inbox.settle("experiment:1", "id")
    assert [o["id"] for o in objs] == [1]

    alloc, alloc_token = await allocate(api, 1, "agent-x", [0])
    await api.call("POST", "/api/v1/trials/1/metrics", {
        "group": "training", "metrics": {"trialId": 1, "trialRunId": alloc.run_id,
                                         "stepsCompleted": 5,
                                         "metrics": {"avgMetrics": {"loss": 0.5}}}},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {alloc_token}"})
    diff = await inbox.next("experiment:1")
    assert [(o["state"], o["totalBatchesProcessed"]) for o in diff["upsert"]] == [
        ("STATE_RUNNING", 5)]
    assert diff["order"] is None and diff["remove"] == []


async def test_changes_outside_a_window_do_not_hold_up_one_inside_it(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only reads space the reads that follow (COALESCE): changes to experiments older than
    the window read nothing, so they must not make a change inside it wait. With a spacing
    of 3 s and an outside change every 50 ms, an inside change still arrives at once."""
    monkeypatch.setattr(feeds, "COALESCE", 3.0)
    for _ in range(3):
        await create(api)
    inbox = await connect(api, "experiments?limit=1")
    assert (await inbox.next("experiments?limit=1"))["order"] == ["3"]
    stop = asyncio.Event()

    async def outside() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            await api.call("PATCH", "/api/v1/experiments/1", {"description": f"old {n}"})
            await asyncio.sleep(0.05)

    noise = asyncio.create_task(outside())
    try:
        # Time itself, on the feed's clock (the event loop's): once the snapshot's read is more
        # than COALESCE ago, only a read since could hold a change; the outside changes run
        # all the while, so that if one counted as a read, the change below would wait.
        await asyncio.sleep(3.2)
        started = time.monotonic()
        await api.call("PATCH", "/api/v1/experiments/3", {"description": "seen"})
        diff = await inbox.next("experiments?limit=1", timeout=2.5)
        assert [o["description"] for o in diff["upsert"]] == ["seen"]
        assert time.monotonic() - started < 2.0
    finally:
        stop.set()
        await noise
    await inbox.ws.close()


async def test_a_change_in_a_window_that_just_changed_is_not_held_for_the_whole_spacing(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a re-read of only the objects a change named, the next change in the window waits
    PARTIAL_SPACING, not COALESCE (meant for whole reads): with a COALESCE of 3 s, a change
    made just after another one's diff still arrives at once."""
    monkeypatch.setattr(feeds, "COALESCE", 3.0)
    for _ in range(3):
        await create(api)
    inbox = await connect(api, "experiments?limit=2")
    assert (await inbox.next("experiments?limit=2"))["order"] == ["3", "2"]
    # Time itself, on the feed's clock (the event loop's): the snapshot's read is more than
    # COALESCE ago, so the first change below is read at once.
    await asyncio.sleep(3.2)
    await api.call("PATCH", "/api/v1/experiments/2", {"description": "first"})
    diff = await inbox.next("experiments?limit=2", timeout=2.5)
    assert [o["description"] for o in diff["upsert"]] == ["first"]
    started = time.monotonic()
    await api.call("PATCH", "/api/v1/experiments/3", {"description": "second"})
    diff = await inbox.next("experiments?limit=2", timeout=2.5)
    assert [o["description"] for o in diff["upsert"]] == ["second"]
    assert time.monotonic() - started < 1.5
    await inbox.ws.close()


async def test_a_burst_of_changes_in_a_window_is_coalesced(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-reads of a few objects are spaced too (PARTIAL_SPACING): 20 changes made back to back
    reach a window's follower in fewer diffs, the last one shown."""
    monkeypatch.setattr(feeds, "PARTIAL_SPACING", 1.0)
    await create(api)
    inbox = await connect(api, "experiments?limit=5")
    await inbox.next("experiments?limit=5")
    for n in range(20):
        await api.call("PATCH", "/api/v1/experiments/1", {"description": f"d{n}"})
    seen: list[str] = []
    while not seen or seen[-1] != "d19":
        seen.append((await inbox.next("experiments?limit=5", timeout=5))["upsert"][0]
                    ["description"])
    assert len(seen) < 20, seen
    await inbox.ws.close()


async def test_the_agents_topic_is_read_at_most_every_agents_spacing(api: Api) -> None:
    """Heartbeats change their agent every time: the agents topic follows them at most twice a
    second (AGENTS_SPACING), not at every heartbeat or every COALESCE, and shows the last."""
    creds = await agent_headers(api)
    await api.call("POST", "/api/v1/agents/register",
                   {"id": "box", "slots": [{"id": 0, "type": "cuda"}], "hostname": "box"},
                   headers=creds)
    inbox = await connect(api, "agents")
    await inbox.next("agents")  # the snapshot
    started = time.monotonic()
    beats = 0
    while time.monotonic() - started < 1.6:
        beats += 1
        await api.call("POST", "/api/v1/agents/box/heartbeat",
                       {"runningAllocations": [], "telemetry": sample(2000.0 + beats, 5.0)},
                       headers=creds)
        await asyncio.sleep(0.03)
    assert beats >= 20
    diffs = []
    with contextlib.suppress(AssertionError):
        while True:
            diffs.append(await inbox.next("agents", 1.0))
    assert 1 <= len(diffs) <= 1.6 / feeds.AGENTS_SPACING + 2, len(diffs)
    assert diffs[-1]["upsert"][0]["telemetry"]["time"] == 2000.0 + beats


def test_an_agents_telemetry_object_is_built_once_per_sample() -> None:
    """The agents list and the agents topic read 100 agents' histories several times a second:
    the object is built once per sample, and a new sample gives a new one with it."""
    from dettui.master.telemetry import AgentTelemetry
    from dettui.protocol import TelemetrySample

    def parsed(when: float, cpu: float) -> TelemetrySample:
        return TelemetrySample.model_validate(sample(when, cpu))

    tel = AgentTelemetry(keep=3)
    assert tel.json() is None
    tel.record([parsed(1.0, 10.0)])
    first = tel.json()
    assert first is not None and tel.json() is first
    tel.record([parsed(1.0, 99.0)])  # seen already: skipped, nothing changes
    assert tel.json() is first
    tel.record([parsed(2.0, 20.0), parsed(3.0, 30.0), parsed(4.0, 40.0)])
    now = tel.json()
    assert now is not first and now is not None
    assert now["history"]["time"] == [2.0, 3.0, 4.0] and now["cpuPercent"] == 40.0
    assert first["history"]["time"] == [1.0]  # what was handed out before is left as it was
