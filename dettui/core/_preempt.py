"""PreemptContext: the chief long-polls the master for a preemption signal and tells workers."""

from __future__ import annotations

import enum
import logging
import threading

from dettui.core._distributed import DistributedContext
from dettui.core._session import Session
from dettui.errors import DettuiError

log = logging.getLogger("dettui.core")
POLL_SECONDS = 60


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptContext:
    def __init__(self, session: Session, allocation_id: str, dist: DistributedContext,
                 mode: PreemptMode = PreemptMode.WorkersAskChief) -> None:
        self._session = session
        self._path = f"/api/v1/allocations/{allocation_id}/signals"
        self._dist = dist
        self._mode = mode
        self._flag = False
        self._first = threading.Event()
        self._stop = threading.Event()
        self._acked = False
        self._thread: threading.Thread | None = None
        if dist.is_chief or mode is PreemptMode.WorkersAskMaster:
            self._thread = threading.Thread(target=self._poll, name="dettui-preempt", daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        timeout = 0
        while not self._stop.is_set():
            try:
                body = self._session.get(f"{self._path}/preemption?timeout_seconds={timeout}",
                                         timeout=timeout + 10, retries=0)
                if bool(body["preempt"]):
                    self._flag = True
                self._first.set()
                if self._flag:
                    return
                timeout = POLL_SECONDS
            except DettuiError as exc:
                log.debug("preemption poll failed: %s", exc)
                self._first.set()
                self._stop.wait(2.0)

    def _ask_master(self) -> bool:
        self._first.wait()
        return self._flag

    def should_preempt(self, auto_ack: bool = True) -> bool:
        if self._mode is PreemptMode.WorkersAskMaster or self._dist.size == 1:
            flag = self._ask_master()
        elif self._mode is PreemptMode.ChiefOnly:
            flag = self._ask_master() if self._dist.is_chief else False
        else:
            flag = bool(self._dist.broadcast(self._ask_master() if self._dist.is_chief
                                             else None))
        if flag and auto_ack:
            self.acknowledge_preemption_signal()
        return flag

    def acknowledge_preemption_signal(self) -> None:
        if self._acked or not self._dist.is_chief:
            return
        self._acked = True
        self._session.post(f"{self._path}/ack_preemption")

    def close(self) -> None:
        self._stop.set()


class DummyPreemptContext:
    def should_preempt(self, auto_ack: bool = True) -> bool:
        return False

    def acknowledge_preemption_signal(self) -> None:
        pass

    def close(self) -> None:
        pass
