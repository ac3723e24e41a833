"""DistributedContext: ranks and sizes, plus gather/allgather/broadcast of Python objects.

Objects travel through torch.distributed's TCPStore (the store torchrun already hosts on
MASTER_ADDR:MASTER_PORT), not a home-made transport, and independently of the process group
the training code creates.
"""

from __future__ import annotations

import os
import pickle
from datetime import timedelta
from typing import Any


class DistributedContext:
    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0,
                 local_size: int = 1, cross_rank: int = 0, cross_size: int = 1,
                 chief_ip: str | None = None, store: Any = None) -> None:
        self.rank, self.size = rank, size
        self.local_rank, self.local_size = local_rank, local_size
        self.cross_rank, self.cross_size = cross_rank, cross_size
        self.chief_ip = chief_ip
        self._store = store
        self._seq = 0
        self._local_seq = 0  # the node's own sequence, for the *_local operations

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        env = os.environ
        rank, size = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
        cross_size = int(env.get("GROUP_WORLD_SIZE", "1"))
        chief_ip = chief_ip or env.get("DET_CHIEF_IP")
        if cross_size > 1 and not chief_ip:
            raise ValueError("chief_ip (DET_CHIEF_IP) is required when spanning several nodes")
        store = None
        if size > 1:
            import torch.distributed as dist

            base = dist.TCPStore(env.get("MASTER_ADDR", "127.0.0.1"),
                                 int(env.get("MASTER_PORT", "29400")), size, False,
                                 timeout=timedelta(minutes=30))
            store = dist.PrefixStore("dettui-core/", base)
        return cls(rank=rank, size=size, local_rank=int(env.get("LOCAL_RANK", "0")),
                   local_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
                   cross_rank=int(env.get("GROUP_RANK", "0")), cross_size=cross_size,
                   chief_ip=chief_ip, store=store)

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

    def allgather(self, obj: Any) -> list[Any]:
        if self.size == 1:
            return [obj]
        self._seq += 1
        self._store.set(f"ag/{self._seq}/{self.rank}", pickle.dumps(obj))
        return [pickle.loads(self._store.get(f"ag/{self._seq}/{r}")) for r in range(self.size)]

    def gather(self, obj: Any) -> list[Any] | None:
        everything = self.allgather(obj)
        return everything if self.is_chief else None

    def broadcast(self, obj: Any = None) -> Any:
        if self.size == 1:
            return obj
        self._seq += 1
        key = f"bc/{self._seq}"
        if self.is_chief:
            self._store.set(key, pickle.dumps(obj))
            return obj
        return pickle.loads(self._store.get(key))

    def allgather_local(self, obj: Any) -> list[Any]:
        """Every object of this node's ranks, by local rank, on each of them."""
        if self.local_size == 1:
            return [obj]
        self._local_seq += 1
        key = f"agl/{self.cross_rank}/{self._local_seq}"
        self._store.set(f"{key}/{self.local_rank}", pickle.dumps(obj))
        return [pickle.loads(self._store.get(f"{key}/{r}")) for r in range(self.local_size)]

    def gather_local(self, obj: Any) -> list[Any] | None:
        """This node's objects to its local chief (the others get None)."""
        everything = self.allgather_local(obj)
        return everything if self.is_local_chief else None

    def broadcast_local(self, obj: Any = None) -> Any:
        """The local chief's object to every rank of its node."""
        if self.local_size == 1:
            return obj
        self._local_seq += 1
        key = f"bcl/{self.cross_rank}/{self._local_seq}"
        if self.is_local_chief:
            self._store.set(key, pickle.dumps(obj))
            return obj
        return pickle.loads(self._store.get(key))

    def close(self) -> None:
        self._store = None


DummyDistributedContext = DistributedContext
