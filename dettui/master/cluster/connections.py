"""The connected agents: their links (outbox, liveness, telemetry), and delivering messages to
them. In memory only: what is lost with the master is re-derived when agents register again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dettui.errors import Gone, NotFound
from dettui.master import scheduler
from dettui.master.store.records import Agent, Allocation
from dettui.master.telemetry import AgentTelemetry
from dettui.protocol import KillWork, StartWork


def kill_message(alloc_id: str, reason: str) -> KillWork:
    """The agent protocol's order to end an allocation's processes."""
    return KillWork(allocation_id=alloc_id, reason=reason)


@dataclass
class AgentLink:
    """A connected agent: its record, when we last heard of it, and its pending work."""

    agent: Agent
    last_seen: float
    outbox: list[StartWork | KillWork] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: set[str] = field(default_factory=set)
    sent_at: dict[str, float] = field(default_factory=dict)
    telemetry: AgentTelemetry = field(default_factory=AgentTelemetry)
    no_gpu_reason: str | None = None  # the agent's note when NVML is unavailable
    sandbox: str = ""  # how the agent runs trials, as it says (RegisterAgentBody.sandbox)
    draining: bool = False  # the agent is stopping: it takes no new work
    # A resource manager inside the master (Slurm) takes the messages itself instead of a
    # remote agent's long-poll.
    sink: Callable[[StartWork | KillWork], None] | None = None

    def send(self, message: StartWork | KillWork) -> None:
        if self.sink is not None:
            self.sink(message)
            return
        self.outbox.append(message)
        self.wake.set()


class ConnectedAgents:
    """Agent id -> link of every connected agent (the dispatcher's delivery targets)."""

    def __init__(self) -> None:
        self._links: dict[str, AgentLink] = {}
        self._lost: dict[str, str] = {}  # agents declared lost since this master started

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._links

    def __iter__(self) -> Iterator[AgentLink]:
        return iter(list(self._links.values()))

    def ids(self) -> frozenset[str]:
        return frozenset(self._links)

    def get(self, agent_id: str) -> AgentLink | None:
        return self._links.get(agent_id)

    def require(self, agent_id: str) -> AgentLink:
        link = self._links.get(agent_id)
        if link is None and agent_id in self._lost:
            raise Gone(f"agent {agent_id} was declared lost ({self._lost[agent_id]}); its "
                       "allocations run elsewhere now: end them, then register again")
        if link is None:
            raise NotFound(f"agent {agent_id} is not registered (register again)")
        return link

    def put(self, link: AgentLink) -> AgentLink | None:
        """Connect `link`, replacing (and waking) an earlier link of the same agent."""
        self._lost.pop(link.agent.id, None)
        old = self._links.get(link.agent.id)
        if old is not None:
            old.wake.set()
            link.telemetry = old.telemetry  # the history survives a re-registration
        self._links[link.agent.id] = link
        return old

    def drop(self, agent_id: str, lost: str | None = None) -> AgentLink | None:
        """Disconnect an agent; `lost` says why the master gave up on it (its next request is
        then told, with a 410, that its allocations run elsewhere)."""
        link = self._links.pop(agent_id, None)
        if link is not None:
            link.wake.set()
        if lost is not None:
            self._lost[agent_id] = lost
        return link

    def wake_all(self) -> None:
        for link in self._links.values():
            link.wake.set()


def views(links: list[AgentLink], live: list[Allocation]) -> list[scheduler.AgentView]:
    """These agents as the scheduler sees them, with the slots `live` allocations hold (from
    a list of links taken on the event loop, so a scheduling pass may build them where it
    reads the store)."""
    used: dict[str, set[int]] = {}
    for alloc in live:
        for agent_id, slots in alloc.parts:
            used.setdefault(agent_id, set()).update(slots)
    return [
        scheduler.AgentView(
            id=link.agent.id, pool=link.agent.pool,
            slot_ids=tuple(int(s["id"]) for s in link.agent.slots
                           if int(s["id"]) not in link.agent.disabled_slots),
            used=frozenset(used.get(link.agent.id, ())),
            enabled=link.agent.enabled and not link.draining and not link.agent.draining)
        for link in links
    ]
