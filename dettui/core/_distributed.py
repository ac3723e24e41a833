"""DistributedContext: ranks and sizes, plus gather/allgather/broadcast of Python objects, with
Determined's signature: build it from the ranks (`DistributedContext(rank=..., size=...,
chief_ip=...)`) or from a launcher's environment (`from_torch_distributed()`,
`from_horovod(hvd)`, `from_deepspeed()`).

The transport is `_exchange` (stdlib sockets), independent of the process group the training
code creates; the chief and each node's local chief listen from the moment the context is
built. Ranks of one node meet on Unix sockets in a directory private to the user (other users
cannot connect). Ranks of several nodes meet over TCP on `pub_port` (the allocation's
INTER_TRAIN_PROCESS_COMM_PORT_1), authenticated by a secret every rank holds: the trial's
session token on a cluster; off a cluster DETTUI_EXCHANGE_KEY, else one the chief makes and
shares through torch.distributed's store (when torch.distributed is initialised: the same
trust as torch's own process group, whose store is unauthenticated) or horovod's
`broadcast_object`. Without any of these the context refuses to span nodes rather than take
unauthenticated pickles. Determined itself uses unauthenticated ZMQ on every interface.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
from typing import Any

from dettui.core._exchange import (
    PUBLIC_KEY,
    ExchangeError,
    Hub,
    Spoke,
    local_socket_path,
    trial_key,
    trial_secret,
)

DEFAULT_PUB_PORT = 12360  # Determined's INTER_TRAIN_PROCESS_COMM_PORT_1
MAX_SLOTS_PER_AGENT = 16
_contexts_built = itertools.count()  # names each context's key in torch's store
NO_SECRET = ("off a cluster, ranks on several nodes need a shared secret before dettui will "
             "take their objects over TCP: run under torchrun, or initialise torch.distributed "
             "(or horovod) before "
             "building the DistributedContext, or set DETTUI_EXCHANGE_KEY to one secret in "
             "every rank's environment")


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


class DistributedContext:
    """Every argument is optional (a missing rank layout is one process, or one node of
    `size` ranks); `chief_ip` is required when the ranks span several nodes.
    `pull_port`, `port_offset` and `force_tcp` are accepted for Determined's signature:
    dettui's transport needs one port."""

    def __init__(self, *, rank: int | None = None, size: int | None = None,
                 local_rank: int | None = None, local_size: int | None = None,
                 cross_rank: int | None = None, cross_size: int | None = None,
                 chief_ip: str | None = None, pub_port: int | None = None,
                 pull_port: int | None = None, port_offset: int = 0,
                 force_tcp: bool = False, _hvd: Any = None) -> None:
        self.rank = rank or 0
        self.size = size or 1
        self.local_rank = self.rank if local_rank is None else local_rank
        self.local_size = self.size if local_size is None else local_size
        self.cross_rank = cross_rank or 0
        self.cross_size = cross_size or 1
        if not 0 <= self.rank < self.size or not 0 <= self.local_rank < self.local_size:
            raise ValueError(f"rank {self.rank} of {self.size} (local {self.local_rank} of "
                             f"{self.local_size}) is not a rank layout")
        if self.local_size != self.size and not chief_ip:
            raise ValueError(f"the ranks span several nodes (local_size {self.local_size} != "
                             f"size {self.size}), so chief_ip (or DET_CHIEF_IP) is required")
        # one node: reach the chief as localhost (and let it listen only there), as Determined
        self.chief_ip = chief_ip if self.local_size != self.size else "127.0.0.1"
        self._pub_port = pub_port or _port("INTER_TRAIN_PROCESS_COMM_PORT_1", DEFAULT_PUB_PORT)
        self._pull_port = pull_port or _port("INTER_TRAIN_PROCESS_COMM_PORT_2",
                                             self._pub_port + MAX_SLOTS_PER_AGENT)
        self._global: Hub | Spoke | None = None
        self._local: Hub | Spoke | None = None
        self._key = self._trial_wide_key(_hvd)
        try:  # the listening ends hold their addresses from the start
            if self.is_chief and self.size > 1:
                self._trial_wide()
            if self.is_local_chief and self.local_size > 1:
                self._node_wide()
        except BaseException:
            self.close()
            raise

    @property
    def _one_node(self) -> bool:
        return self.local_size == self.size

    def _trial_wide_key(self, hvd: Any) -> bytes:
        """The handshake key of the trial-wide collectives (see the module docstring)."""
        if self.size == 1 or self._one_node:
            return trial_key()  # a private Unix socket
        secret = trial_secret() or _shared_through_torch(self.rank, self._pub_port)
        if secret is None and hvd is not None and hasattr(hvd, "broadcast_object"):
            secret = PUBLIC_KEY + hvd.broadcast_object(os.urandom(32).hex().encode(),
                                                       root_rank=0)
        if secret is None:
            raise ExchangeError(NO_SECRET)
        return secret

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
        GROUP_RANK, GROUP_WORLD_SIZE). Off a cluster (no INTER_TRAIN_PROCESS_COMM_PORT_1) the
        chief listens on the port after torchrun's MASTER_PORT, so two runs on one machine
        do not meet."""
        env = os.environ
        pub_port = None
        if not env.get("INTER_TRAIN_PROCESS_COMM_PORT_1") and env.get("MASTER_PORT"):
            pub_port = int(env["MASTER_PORT"]) + 1
        return cls(rank=int(env.get("RANK", "0")), size=int(env.get("WORLD_SIZE", "1")),
                   local_rank=int(env.get("LOCAL_RANK", "0")),
                   local_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
                   cross_rank=int(env.get("GROUP_RANK", "0")),
                   cross_size=int(env.get("GROUP_WORLD_SIZE", "1")),
                   chief_ip=chief_ip or env.get("DET_CHIEF_IP"), pub_port=pub_port)

    @classmethod
    def from_horovod(cls, hvd: Any, chief_ip: str | None = None) -> DistributedContext:
        """From an initialised horovod module (`import horovod.torch as hvd; hvd.init()`)."""
        return cls(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                   local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
                   cross_size=hvd.cross_size(),
                   chief_ip=chief_ip or os.environ.get("DET_CHIEF_IP"), _hvd=hvd)

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From DeepSpeed's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_SIZE,
        CROSS_RANK, CROSS_SIZE)."""
        env = os.environ
        return cls(rank=int(env["RANK"]), size=int(env["WORLD_SIZE"]),
                   local_rank=int(env["LOCAL_RANK"]), local_size=int(env["LOCAL_SIZE"]),
                   cross_rank=int(env["CROSS_RANK"]), cross_size=int(env["CROSS_SIZE"]),
                   chief_ip=chief_ip or env.get("DET_CHIEF_IP"))

    def get_rank(self) -> int:
        return self.rank

    def get_size(self) -> int:
        return self.size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        """The number of agents (nodes) the trial runs on."""
        return self.cross_size

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def _trial_wide(self) -> Hub | Spoke:
        if self._global is None:
            family: socket.AddressFamily
            hub_at: Any
            join_at: Any
            if self._one_node:
                family = socket.AF_UNIX
                hub_at = join_at = local_socket_path(str(self.chief_ip), self._pub_port, "trial")
            else:
                family = socket.AF_INET
                hub_at = (_bindable(self.chief_ip), self._pub_port)
                join_at = (self.chief_ip, self._pub_port)
            self._global = (Hub(family, hub_at, self.size - 1, self._key) if self.is_chief
                            else Spoke(family, join_at, self.rank, self._key))
        return self._global

    def _node_wide(self) -> Hub | Spoke:
        if self._local is None:
            path = local_socket_path(str(self.chief_ip), self._pub_port, self.cross_rank)
            self._local = (Hub(socket.AF_UNIX, path, self.local_size - 1, trial_key())
                           if self.is_local_chief else
                           Spoke(socket.AF_UNIX, path, self.local_rank, trial_key()))
        return self._local

    def allgather(self, stuff: Any) -> list[Any]:
        """Every rank's object, by rank, on each of them."""
        if self.size == 1:
            return [stuff]
        return _allgather(self._trial_wide(), stuff)

    def gather(self, stuff: Any) -> list[Any] | None:
        """Every rank's object to the chief (the others get None)."""
        if self.size == 1:
            return [stuff]
        return _gather(self._trial_wide(), stuff)

    def broadcast(self, stuff: Any = None) -> Any:
        """The chief's object to every rank."""
        if self.size == 1:
            return stuff
        return _broadcast(self._trial_wide(), stuff)

    def allgather_local(self, stuff: Any) -> list[Any]:
        """Every object of this node's ranks, by local rank, on each of them."""
        if self.local_size == 1:
            return [stuff]
        return _allgather(self._node_wide(), stuff)

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """This node's objects to its local chief (the others get None)."""
        if self.local_size == 1:
            return [stuff]
        return _gather(self._node_wide(), stuff)

    def broadcast_local(self, stuff: Any = None) -> Any:
        """The local chief's object to every rank of its node."""
        if self.local_size == 1:
            return stuff
        return _broadcast(self._node_wide(), stuff)

    def close(self) -> None:
        for end in (self._global, self._local):
            if end is not None:
                end.close()
        self._global = self._local = None


class DummyDistributedContext(DistributedContext):
    """One process: every collective returns at once."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0,
                         cross_size=1)


def _allgather(end: Hub | Spoke, stuff: Any) -> list[Any]:
    if isinstance(end, Hub):
        everything = [stuff, *end.gather()]
        end.send_all(everything)
        return everything
    end.send(stuff)
    return list(end.recv())


def _gather(end: Hub | Spoke, stuff: Any) -> list[Any] | None:
    if isinstance(end, Hub):
        everything = [stuff, *end.gather()]
        end.send_all(None)  # so no rank sends its next gather's object early
        return everything
    end.send(stuff)
    end.recv()
    return None


def _broadcast(end: Hub | Spoke, stuff: Any) -> Any:
    if isinstance(end, Hub):
        end.send_all(stuff)
        return stuff
    return end.recv()


def _shared_through_torch(rank: int, port: int) -> bytes | None:
    """A secret the chief makes and puts in torch.distributed's store: the default group's,
    if the script has initialised torch.distributed, else torchrun's own (its agent hosts
    it at MASTER_ADDR:MASTER_PORT for the workers' process group). Torch is imported only
    when the script did, or under torchrun."""
    store = _torch_store()
    if store is None:
        return None
    name = f"dettui/exchange-key/{port}/{next(_contexts_built)}"
    if rank == 0:
        store.set(name, os.urandom(32).hex())
    return PUBLIC_KEY + bytes(store.get(name))


def _torch_store() -> Any:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true" and \
            env.get("MASTER_ADDR") and env.get("MASTER_PORT", "").isdigit():
        import datetime

        from torch.distributed import TCPStore

        return TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False,
                        timeout=datetime.timedelta(seconds=120))
    return None


def _bindable(ip: str | None) -> str:
    """The chief's own address if this machine has it, else every interface."""
    if not ip:
        return ""
    try:
        with socket.socket() as probe:
            probe.bind((ip, 0))
        return ip
    except OSError:
        return ""
