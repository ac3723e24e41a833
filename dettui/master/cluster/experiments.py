"""Experiment control: pause, cancel, kill and activate, each one store command whose kills and
preemptions are delivered after the commit."""

from __future__ import annotations

from dettui.master.cluster.allocations import Allocations
from dettui.master.cluster.hub import Hub
from dettui.master.store import control
from dettui.models import ExperimentState


class Experiments:
    def __init__(self, hub: Hub, allocations: Allocations) -> None:
        self.hub = hub
        self.allocations = allocations

    async def stop(self, exp_id: int, how: ExperimentState) -> None:
        """Kill (STOPPING_KILLED) ends processes now; cancel and pause ask trials to checkpoint."""
        await self.stopped(exp_id, await self.hub.db.run(control.stop, exp_id, how))

    async def stopped(self, exp_id: int, stopped: control.Stopped) -> None:
        """What a committed stop leaves to do (`stop`, or a checkpoint over its quota)."""
        for alloc in stopped.kill:
            await self.allocations.deliver_kill(alloc, "experiment killed")
        for alloc_id in stopped.preempt:
            self.hub.preempted(alloc_id)
        self.hub.experiment_changed(exp_id, jobs=True)
        await self.allocations.ended(stopped.ended)
        self.hub.kick()

    async def activate(self, exp_id: int) -> None:
        if await self.hub.db.run(control.activate, exp_id):
            self.hub.experiment_changed(exp_id, jobs=True)
            self.hub.kick()

    async def kill_trial(self, trial_id: int, exp_id: int) -> None:
        stopped = await self.hub.db.run(control.kill_trial, trial_id)
        for alloc in stopped.kill:
            await self.allocations.deliver_kill(alloc, "trial killed")
        self.hub.notify(f"trial:{trial_id}", f"experiment:{exp_id}", "jobs", "experiments")
        await self.allocations.ended(stopped.ended)
        self.hub.kick()
