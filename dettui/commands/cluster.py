"""`dettui job list`, `dettui agent list`."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

from dettui.client import Client
from dettui.commands import output
from dettui.errors import InvalidArgument, NotFound


async def job_list(c: Client, *, pool: str | None, as_json: bool) -> None:
    pools = await c.pools()
    chosen = next((p for p in pools if (p["name"] == pool if pool else p["defaultComputePool"])),
                  None)
    if chosen is None:
        raise NotFound(f"resource pool '{pool}' not found")
    jobs = await c.jobs(chosen["name"])
    if as_json:
        output.print_json(jobs)
        return
    priority = chosen["schedulerType"] == "SCHEDULER_TYPE_PRIORITY"
    rows = []
    for j in jobs:
        ahead = j["summary"]["jobsAhead"]
        name = f"{j['name']} ({j['entityId']})" if j["type"] == "TYPE_EXPERIMENT" else j["name"]
        rows.append((ahead if ahead >= 0 else "N/A", j["jobId"][:8],
                     str(j["type"]).removeprefix("TYPE_"), name,
                     j["priority"] if priority else j["weight"], output.when(j["submissionTime"]),
                     f"{j['allocatedSlots']}/{j['requestedSlots']}", job_state(j),
                     j.get("waitReason") or "", j["username"]))
    heads = ["#", "ID", "Type", "Job Name", "Priority" if priority else "Weight", "Submitted",
             "Slots", "State", "Why waiting", "User"]  # Slots: acquired/needed
    least_needed = ["Submitted", "Type", "User"]
    output.table(f"Job queue: {chosen['name']}", heads, rows, least_needed=least_needed)
    lines = whole_reasons(heads, rows, least_needed)
    if lines:  # plain text where the table went: a list command never loads Rich
        file = output.screen()[0]
        file.write("\n".join(lines) + "\n")
        file.flush()


WHOLE_REASONS = 20  # distinct reasons said whole under a table too narrow for them, at most


def whole_reasons(heads: list[str], rows: list[tuple[Any, ...]],
                  least_needed: list[str]) -> list[str]:
    """The reasons the job table cuts (an 80-column terminal leaves ~20 characters of a
    140-character "can never start here: ..."), each whole under it once, with the jobs it is
    said of, wrapped at words."""
    if output.WIDE or not rows:
        return []
    width = output.screen()[1]
    cells = [[output.cell(v) for v in row] for row in rows]
    widths = [max(output.text_width(h), *(output.text_width(c[i]) for c in cells))
              for i, h in enumerate(heads)]
    kept, clipped, _, _ = output.fit(heads, cells, widths, width, least_needed)
    at = heads.index("Why waiting")
    shown = kept.index("Why waiting") if "Why waiting" in kept else None
    jobs: dict[str, list[str]] = {}  # reason -> the jobs it is cut for, in queue order
    for row, fitted in zip(cells, clipped, strict=True):
        if row[at] and (shown is None or fitted[shown] != row[at]):
            jobs.setdefault(row[at], []).append(row[1])
    if not jobs:
        return []
    lines = ["Why waiting, whole:"]
    for why, ids in list(jobs.items())[:WHOLE_REASONS]:
        more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
        lines += textwrap.wrap(f"{', '.join(ids[:3])}{more}: {why}", width=max(width, 20),
                               initial_indent="  ", subsequent_indent="    ")
    if len(jobs) > WHOLE_REASONS:
        lines.append(f"  ({len(jobs) - WHOLE_REASONS} more reasons; --wide shows each whole)")
    return lines


def job_state(job: dict[str, Any]) -> str:
    """The queue's state in plain words, as the dashboard shows it, unless the experiment's
    says more (PAUSED, not QUEUED; STOPPING_CANCELED, not SCHEDULED); a job that waits says
    why."""
    state = output.state(job["summary"]["state"])
    experiment = output.state(job.get("experimentState"))
    if experiment and experiment != "ACTIVE":
        state = experiment
    if job.get("unschedulableReason") and state == "QUEUED" and not job.get("waitReason"):
        state += f" ({job['unschedulableReason']})"  # (a master that words no waitReason)
    return state


async def agent_list(c: Client, *, as_json: bool) -> None:
    if as_json:
        output.print_json(await c.agents())
        return
    agents, tasks = await asyncio.gather(c.agents(), c.tasks())
    running = running_on(tasks)
    rows = []
    for a in agents:
        slots = a["slots"].values()
        used = sum(1 for s in slots if s.get("container"))
        types = sorted({s["device"]["type"].removeprefix("TYPE_") for s in slots})
        rows.append((a["id"], "yes" if a["enabled"] else "no", a.get("hostname", ""),
                     ",".join(a["resourcePools"]), f"{used} of {len(a['slots'])}",
                     ", ".join(running.get(a["id"], [])) or "-", ",".join(types),
                     output.when(a["registeredTime"]), a.get("sandbox") or "-"))
    output.table("Agents", ["Agent ID", "Enabled", "Host", "Pool", "Slots", "Running",
                            "Slot type", "Registered Time", "Trials run"],
                 rows, least_needed=["Registered Time", "Slot type"])


def running_on(tasks: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What runs on each agent, by agent id: `exp 3 trial 7 (2 slots)` per allocation part
    there, in the order the allocations started."""
    out: dict[str, list[str]] = {}
    for t in sorted(tasks, key=lambda t: (t.get("registeredTime") or "", t["allocationId"])):
        for part in t.get("resources") or []:
            n = len(part.get("slots") or [])
            out.setdefault(part["agentId"], []).append(
                f"exp {t.get('experimentId')} trial {t.get('trialId')} "
                f"({n} slot{'' if n == 1 else 's'})")
    return out


async def resolve_job(c: Client, ref: str) -> str:
    """A full job id from a full id or a unique prefix (job list shows 8 characters)."""
    ids = [j["jobId"] for j in await c.jobs()]
    if ref in ids:
        return ref
    matches = [i for i in ids if i.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"job {ref} not found in the queue")
    raise InvalidArgument(f"job id prefix {ref} is ambiguous: {', '.join(m[:12] for m in matches)}")


UPDATE_KEYS = {"priority": "priority", "weight": "weight", "resource-pool": "resource_pool",
               "ahead-of": "ahead_of", "behind-of": "behind_of"}  # -> Client.update_job


async def job_update(c: Client, ref: str, key: str, value: str) -> None:
    job_id = await resolve_job(c, ref)
    field = UPDATE_KEYS[key]
    change: dict[str, Any] = {field: value}
    if field == "priority":
        change[field] = _number(value, int, "priority")
    elif field == "weight":
        change[field] = _number(value, float, "weight")
    elif field in ("ahead_of", "behind_of"):
        change[field] = await resolve_job(c, value)
    await c.update_job(job_id, **change)
    output.console.print(f"Updated job {job_id[:8]}: {key} {value}")


def _number(value: str, kind: type, name: str) -> object:
    try:
        return kind(value)
    except ValueError as exc:
        raise InvalidArgument(f"{name}: expected a number, got {value!r}") from exc


async def job_update_batch(c: Client, items: list[str]) -> None:
    """`ID.priority=1 ID.resource-pool=x ID.ahead-of=ID2 ...`: one update per item, in order."""
    parsed = []
    for item in items:
        left, sep, value = item.partition("=")
        ref, dot, key = left.partition(".")
        if not sep or not dot or key not in UPDATE_KEYS:
            raise InvalidArgument(f"{item!r}: expected JOB.KEY=VALUE with KEY one of "
                                  f"{', '.join(UPDATE_KEYS)}")
        parsed.append((ref, key, value))
    for ref, key, value in parsed:
        await job_update(c, ref, key, value)


async def task_list(c: Client, *, as_json: bool) -> None:
    tasks = await c.tasks()
    if as_json:
        output.print_json(tasks)
        return
    rows = [(t["allocationId"], t["name"], t["experimentId"], t["state"],
             ", ".join(f"{r['agentId']}:{r['slots']}" for r in t["resources"]),
             "yes" if t["preempting"] else "", output.when(t["registeredTime"]))
            for t in sorted(tasks, key=lambda t: t["registeredTime"])]
    output.table("Tasks", ["Allocation ID", "Name", "Experiment", "State", "Agent:slots",
                           "Preempting", "Started"], rows)


async def agent_enable(c: Client, agent_id: str, enabled: bool) -> None:
    await c.set_agent_enabled(agent_id, enabled)
    what = "enabled" if enabled else "disabled (running work finishes, nothing new starts)"
    output.console.print(f"Agent {agent_id} {what}")


async def agent_token(c: Client, verb: str | None, cred_id: str | None, *, description: str,
                      as_json: bool) -> None:
    """`dettui agent token create|list|revoke ID`: the credentials agents join with."""
    if verb == "create":
        body = await c.create_agent_credential(description)
        if as_json:
            output.print_json(body)
            return
        # the secret alone on stdout, so `... token create > agent.token` is the agent's file
        output.err_console.print(f"Agent credential {body['credential']['id']} (shown once; "
                                 "start an agent with it):")
        output.console.print(body["token"], markup=False, highlight=False, soft_wrap=True)
    elif verb in ("list", "ls"):
        creds = await c.agent_credentials()
        if as_json:
            output.print_json(creds)
            return
        rows = [(x["id"], x["agentId"] or "(not used yet)", x["description"],
                 output.when(x["createdAt"]), "revoked" if x["revoked"] else "")
                for x in creds]
        output.table("Agent credentials", ["ID", "Agent", "Description", "Created", ""], rows)
    elif verb == "revoke":
        if not cred_id or not cred_id.isdigit():
            raise InvalidArgument("dettui agent token revoke needs a credential id")
        await c.revoke_agent_credential(int(cred_id))
        output.console.print(f"Agent credential {cred_id} revoked")
    else:
        raise InvalidArgument("dettui agent token: expected create, list or revoke ID")
