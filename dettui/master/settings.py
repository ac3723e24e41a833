"""Master settings: where it listens, where it keeps state, its timing knobs and its quotas."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from dettui import byte_size
from dettui.config import yamlsafe
from dettui.errors import ConfigError, InvalidArgument
from dettui.master.scheduler import FAIR_SHARE, PRIORITY, PoolPolicy


@dataclass(frozen=True)
class SlurmPool:
    """A resource pool backed by a Slurm partition (one sbatch job per allocation)."""

    pool: str
    partition: str
    slots_per_node: int = 1
    master_url: str | None = None  # how compute nodes reach the master (default: its URL)
    python: str | None = None  # the Python with dettui on the nodes (default: the master's)
    work_dir: Path | None = None  # where nodes put allocations' work dirs (default: state dir)
    sbatch_args: tuple[str, ...] = ()  # extra sbatch options (--time, --account, --qos...)
    poll_seconds: float = 2.0  # between looks at the jobs (squeue/scontrol)


@dataclass(frozen=True)
class MasterSettings:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    admin_password: str | None = None
    cluster_name: str = "dettui"
    default_pool: str = "default"
    agent_timeout: float = 20.0  # seconds without a heartbeat before an agent is gone
    heartbeat_interval: float = 2.0
    checkpoint_dir: Path | None = None  # default shared_fs host_path; state_dir/checkpoints
    policies: dict[str, PoolPolicy] = field(default_factory=lambda: {"default": PoolPolicy()})
    preemption_timeout: float = 3600.0  # seconds a preempted trial has to checkpoint and exit
    session_lifetime: float = 7 * 24 * 3600.0  # seconds a login lasts (Determined: 7 days)
    slurm: dict[str, SlurmPool] = field(default_factory=dict)  # pools backed by Slurm
    fresh_pools: frozenset[str] = frozenset()  # pools whose trials never fork (fork_server)
    db_url: str | None = None  # postgresql://USER@HOST:PORT/DB; None: SQLite in the state dir
    # bytes of checkpoint storage (checkpoints holding files) an experiment, and all of a
    # user's experiments together, may use; None: no quota (store.checkpoint_quota)
    checkpoint_quota: int | None = None
    checkpoint_quota_per_user: int | None = None

    @property
    def pools(self) -> tuple[str, ...]:
        return tuple(self.policies)

    def policy(self, pool: str) -> PoolPolicy:
        return self.policies.get(pool, PoolPolicy())

    @property
    def db_path(self) -> Path:
        return self.state_dir / "master.db"

    @property
    def db_target(self) -> Path | str:
        """Where the store is: the PostgreSQL URL, else the SQLite file in the state dir."""
        return self.db_url or self.db_path

    @property
    def checkpoint_root(self) -> Path:
        return self.checkpoint_dir or self.state_dir / "checkpoints"


def db_url(value: str | None) -> str | None:
    """`--db` (or $DETTUI_DB) checked: a PostgreSQL URL, or None (empty: SQLite)."""
    if not value:
        return None
    from dettui.master.store import pg

    try:
        pg.check_url(value)
    except InvalidArgument as exc:
        raise InvalidArgument(f"--db: {exc}") from exc
    return value


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback
                       for info in socket.getaddrinfo(host, None))
        except OSError:
            return False


def check_exposure(host: str, passwordless: Sequence[str]) -> None:
    """Refuse to listen beyond loopback while an active user (`passwordless`, their names) can
    log in with an empty password: anyone who reaches the address could run code as them."""
    if is_loopback(host) or not passwordless:
        return
    names = ", ".join(f"'{name[:64]}'" for name in list(passwordless)[:10])
    if len(passwordless) > 10:
        names += f" and {len(passwordless) - 10} more"
    have = "has an empty password" if len(passwordless) == 1 else "have empty passwords"
    raise InvalidArgument(
        f"refusing to listen on {host}: user{'s' if len(passwordless) > 1 else ''} {names} "
        f"{have}, so anyone who can reach this address could log in and run code on your "
        "agents. Set a password first, with the master on 127.0.0.1: "
        "`dettui user change-password NAME` (or `dettui user deactivate NAME`); "
        "`dettui serve --admin-password ...` (or DETTUI_ADMIN_PASSWORD) sets admin's, and "
        "determined's while it has none. "
        "Or listen on 127.0.0.1 and reach the master through an SSH tunnel."
    )


# --- the master config file (`dettui serve --config master.yaml`) ----------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SchedulerConfig(_Strict):
    type: Literal["priority", "fair_share"] = "priority"
    preemption: bool = False
    fitting_policy: Literal["best", "worst"] = "best"


class SlurmProviderConfig(_Strict):
    type: Literal["slurm"]
    partition: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$")
    slots_per_node: int = Field(default=1, ge=1, le=1024)
    master_url: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    python: str | None = None
    work_dir: str | None = None
    sbatch_args: list[str] = Field(default_factory=list, max_length=64)
    poll_seconds: float = Field(default=2.0, gt=0, le=600)


class PoolConfig(_Strict):
    pool_name: str = Field(min_length=1)
    description: str = ""
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    provider: SlurmProviderConfig | None = None  # none: dettui agents
    # false: every trial in this pool starts a fresh interpreter (no fork server)
    fork_server: bool = True


def _size(value: Any) -> int | None:
    """A size in the master config ("50GiB", "500MB", bytes); null: none."""
    if value is None:
        return None
    if not isinstance(value, str | int):
        raise ValueError("must be a size such as 50GiB, 500MiB or a number of bytes")
    size = byte_size.parse(value)
    if size <= 0:
        raise ValueError("must be more than 0 bytes (leave it out for no quota)")
    return size


Size = Annotated[int | None, BeforeValidator(_size)]


class MasterConfig(_Strict):
    host: str | None = None
    port: int | None = Field(default=None, ge=0, le=65535)
    state_dir: str | None = None
    cluster_name: str | None = None
    default_compute_pool: str | None = None
    preemption_timeout: float | None = Field(default=None, ge=0)
    session_lifetime: float | None = Field(default=None, gt=0)  # seconds a login lasts
    resource_pools: list[PoolConfig] = Field(default_factory=list)
    checkpoint_storage_quota: Size = None  # per experiment: "50GiB"
    checkpoint_storage_quota_per_user: Size = None  # all of one user's experiments together


def load_master_config(path: Path) -> MasterConfig:
    """Read and validate a master config file; every problem named with its path."""
    try:
        data = yamlsafe.load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError([f"cannot read {path}: {exc.strerror}"], str(path)) from exc
    except (yaml.YAMLError, yamlsafe.YamlTooBig) as exc:
        raise ConfigError([f"malformed YAML: {exc}"], str(path)) from exc
    if not isinstance(data, dict):
        raise ConfigError(["the master config must be a mapping"], str(path))
    try:
        cfg = MasterConfig.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(problems, str(path)) from exc
    names = [p.pool_name for p in cfg.resource_pools]
    if len(set(names)) != len(names):
        raise ConfigError(["resource_pools: pool names must be unique"], str(path))
    if cfg.default_compute_pool and names and cfg.default_compute_pool not in names:
        raise ConfigError([f"default_compute_pool: '{cfg.default_compute_pool}' is not one of "
                           f"the resource_pools ({', '.join(names)})"], str(path))
    return cfg


def policies_of(cfg: MasterConfig, preemption: bool = False) -> dict[str, PoolPolicy]:
    if not cfg.resource_pools:
        return {"default": PoolPolicy(PRIORITY, preemption)}
    return {p.pool_name: PoolPolicy(FAIR_SHARE if p.scheduler.type == "fair_share" else PRIORITY,
                                    p.scheduler.preemption or preemption)
            for p in cfg.resource_pools}


def settings_from(cfg: MasterConfig, **overrides: Any) -> dict[str, Any]:
    """MasterSettings keyword arguments from a config file; explicit flags win."""
    out: dict[str, Any] = {}
    for key in ("host", "port", "cluster_name", "preemption_timeout", "session_lifetime"):
        value = getattr(cfg, key)
        if value is not None:
            out[key] = value
    if cfg.state_dir:
        out["state_dir"] = Path(cfg.state_dir)
    out["policies"] = policies_of(cfg, bool(overrides.pop("preemption", False)))
    out["default_pool"] = cfg.default_compute_pool or next(iter(out["policies"]))
    out["slurm"] = slurm_pools(cfg)
    out["fresh_pools"] = frozenset(p.pool_name for p in cfg.resource_pools if not p.fork_server)
    out["checkpoint_quota"] = cfg.checkpoint_storage_quota
    out["checkpoint_quota_per_user"] = cfg.checkpoint_storage_quota_per_user
    out.update({k: v for k, v in overrides.items() if v is not None})
    return out


def slurm_pools(cfg: MasterConfig) -> dict[str, SlurmPool]:
    """The pools of the config file that Slurm backs."""
    return {p.pool_name: SlurmPool(
        p.pool_name, p.provider.partition, p.provider.slots_per_node, p.provider.master_url,
        p.provider.python, Path(p.provider.work_dir) if p.provider.work_dir else None,
        tuple(p.provider.sbatch_args), p.provider.poll_seconds)
        for p in cfg.resource_pools if p.provider is not None}
