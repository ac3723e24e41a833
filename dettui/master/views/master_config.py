"""`det master config`: the master's effective settings, in the keys of its config file
(`dettui serve --config master.yaml`) and Determined's names where they share one, with every
secret redacted as Determined's `Printable()` does (passwords, the database URL's password)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from dettui import __version__
from dettui.master.settings import MasterSettings
from dettui.master.store import pg

REDACTED = "********"


def effective(settings: MasterSettings, cluster_id: str) -> dict[str, Any]:
    """The settings the master runs with, secrets redacted."""
    pools = [{"pool_name": name, "scheduler": {
        "type": policy.scheduler, "preemption": policy.preemption}}
        for name, policy in settings.policies.items()]
    for name, slurm in settings.slurm.items():
        pools.append({"pool_name": name, "provider": {
            "type": "slurm", "partition": slurm.partition,
            "slots_per_node": slurm.slots_per_node}})
    return {
        "version": __version__,
        "cluster_id": cluster_id,
        "cluster_name": settings.cluster_name,
        "host": settings.host,
        "port": settings.port,
        "state_dir": str(settings.state_dir),
        "db": {"type": "postgres", "url": redact_url(settings.db_url)} if settings.db_url
        else {"type": "sqlite", "path": str(settings.db_path)},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(settings.checkpoint_root)},
        "default_compute_pool": settings.default_pool,
        "resource_pools": pools,
        "agent_timeout": settings.agent_timeout,
        "heartbeat_interval": settings.heartbeat_interval,
        "preemption_timeout": settings.preemption_timeout,
        "session_lifetime": settings.session_lifetime,
        "checkpoint_storage_quota": settings.checkpoint_quota,
        "checkpoint_storage_quota_per_user": settings.checkpoint_quota_per_user,
        "security": {"initial_user_password": REDACTED if settings.admin_password else ""},
    }


def redact_url(url: str) -> str:
    """A database URL without its password, in the netloc or as a query parameter."""
    parts = urlsplit(pg.redact(url))
    query = [(k, REDACTED if "password" in k.lower() else v)
             for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="*")))
