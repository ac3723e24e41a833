"""Who calls a request: a user's session, a trial's allocation token or an agent's credential.

`middleware.auth` finds it from the request's token and keeps it on the request
(`appkeys.PRINCIPAL`); the `require_*` checks in `middleware` read it."""

from __future__ import annotations

from dataclasses import dataclass

from dettui.master.store.credentials import AgentCredential
from dettui.master.store.records import Allocation, User


@dataclass(frozen=True)
class Principal:
    user: User | None  # None for an agent
    token: str
    allocation: Allocation | None = None  # set for allocation (task) tokens
    agent: AgentCredential | None = None  # set for agent credentials
    trial_session: str | None = None  # a trial's DET_USER_TOKEN: the allocation it ends with
