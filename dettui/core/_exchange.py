"""The sockets DistributedContext's collectives travel through (stdlib only).

One rank listens (a `Hub`: the chief, or a node's local chief) and every other rank connects
to it once (a `Spoke`), on its first collective; the hub binds when the context is built, so
its address is held from the start. Ranks of one node meet on a Unix socket in a directory
only this user can enter; ranks of several nodes meet over TCP. Each connection starts with a
mutual HMAC handshake keyed by a secret every rank holds: the trial's session token on a
cluster, else `DETTUI_EXCHANGE_KEY`, else one the chief shares through torch.distributed's
store or horovod's broadcast (see `_distributed`). Over TCP a stranger without that secret
can neither feed pickles to the ranks nor read theirs; without any secret TCP is refused.
After the handshake objects travel as pickles in `multiprocessing.connection` frames.
Handshakes run concurrently with a short timeout, so idle strangers cannot stall a
collective.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import pickle
import queue
import socket
import stat
import struct
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

CONNECT_TIMEOUT = 30 * 60.0  # how long a rank waits for its hub (the chief may load slowly)
HANDSHAKE_TIMEOUT = 5.0  # a peer that connects but does not answer is dropped after this
MAX_PENDING = 64  # handshakes under way at once; further connections wait to be accepted
NONCE = 32
SUN_PATH = 108  # bytes of a Unix socket address on Linux, its final NUL included
SOCKET_NAME = 25  # "<20 hex>.sock"
PUBLIC_KEY = b"dettui-core/"


class ExchangeError(RuntimeError):
    """A collective could not reach its peers."""


def trial_secret() -> bytes | None:
    """A secret every rank of this run holds, if the environment gives one: the session
    token (on a cluster, the same for all ranks of an allocation) or DETTUI_EXCHANGE_KEY."""
    secret = os.environ.get("DET_SESSION_TOKEN") or os.environ.get("DETTUI_EXCHANGE_KEY")
    return PUBLIC_KEY + secret.encode() if secret else None


def trial_key() -> bytes:
    """The handshake key for node-local Unix sockets: the secret if there is one, else the
    public prefix (there the private directory keeps other users out)."""
    return trial_secret() or PUBLIC_KEY


def _mac(key: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, role + nonce, hashlib.sha256).digest()


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the peer closed the connection during the handshake")
        out += chunk
    return out


def _to_connection(sock: socket.socket) -> Connection:
    sock.settimeout(None)  # blocking again before the descriptor changes hands
    return Connection(sock.detach())


class Hub:
    """The listening end: `count` peers, numbered 1..count, connect and are kept in order."""

    def __init__(self, family: socket.AddressFamily, address: Any, count: int,
                 key: bytes) -> None:
        self._count, self._key = count, key
        self._path = address if family == socket.AF_UNIX else None
        if family == socket.AF_UNIX:
            _clear_stale(address)
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family != socket.AF_UNIX:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind(address)
            self._sock.listen(max(count + 8, 128))
        except OSError as exc:
            self._sock.close()
            raise ExchangeError(f"cannot listen on {address!r} for the other ranks: {exc} "
                                "(set INTER_TRAIN_PROCESS_COMM_PORT_1 to a free port)") from exc
        self._peers: list[Connection] | None = None

    def peers(self) -> list[Connection]:
        """Every peer's connection, by number (waits for them on the first call). Each
        connection's handshake runs in its own thread, so a silent one holds up nothing."""
        if self._peers is None:
            admitted: queue.Queue[tuple[int | None, socket.socket]] = queue.Queue()
            pending = threading.BoundedSemaphore(MAX_PENDING)
            found: dict[int, Connection] = {}
            self._sock.settimeout(0.05)
            try:
                while len(found) < self._count:
                    self._accept_one(admitted, pending)
                    while not admitted.empty():
                        number, sock = admitted.get()
                        if number is None or number in found or not 1 <= number <= self._count:
                            sock.close()
                        else:
                            found[number] = _to_connection(sock)
            finally:
                self._sock.settimeout(None)
            self._peers = [found[n] for n in sorted(found)]
        return self._peers

    def _accept_one(self, admitted: queue.Queue[tuple[int | None, socket.socket]],
                    pending: threading.BoundedSemaphore) -> None:
        if not pending.acquire(timeout=0.05):
            return  # too many handshakes under way: the rest wait in the backlog
        try:
            sock, _ = self._sock.accept()
        except TimeoutError:
            pending.release()
            return

        def admit() -> None:
            try:
                admitted.put((self._admit(sock), sock))
            finally:
                pending.release()

        threading.Thread(target=admit, daemon=True, name="dettui-exchange-admit").start()

    def _admit(self, sock: socket.socket) -> int | None:
        """The peer's number if it proves it holds the key (and learns we do), else None."""
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            challenge = os.urandom(NONCE)
            sock.sendall(challenge)
            answer = _read_exact(sock, 32 + NONCE + 4)
            if not hmac.compare_digest(answer[:32], _mac(self._key, b"spoke", challenge)):
                return None
            sock.sendall(_mac(self._key, b"hub", answer[32:32 + NONCE]))
            return int(struct.unpack("!I", answer[32 + NONCE:])[0])
        except OSError:
            return None

    def gather(self) -> list[Any]:
        return [pickle.loads(c.recv_bytes()) for c in self.peers()]

    def send_all(self, obj: Any) -> None:
        data = pickle.dumps(obj)
        for c in self.peers():
            c.send_bytes(data)

    def close(self) -> None:
        for c in self._peers or []:
            c.close()
        self._sock.close()
        if self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)


class Spoke:
    """A connecting end, number `number` among its hub's peers."""

    def __init__(self, family: socket.AddressFamily, address: Any, number: int,
                 key: bytes, timeout: float = CONNECT_TIMEOUT) -> None:
        deadline, pause = time.monotonic() + timeout, 0.02
        while True:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                # the hub answers once it reaches its own first collective: wait that long
                sock.settimeout(max(deadline - time.monotonic(), 1.0))
                sock.connect(address)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise ExchangeError(f"no rank listens on {address!r} after {timeout:.0f}s: "
                                        f"{exc}") from exc
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
            except OSError as exc:
                sock.close()
                raise ExchangeError(f"cannot reach the other ranks at {address!r}: {exc}") from exc
        try:
            self._conn = self._handshake(sock, number, key)
        except ExchangeError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            raise ExchangeError(f"the rank listening on {address!r} did not let this rank in: "
                                f"{exc} (is it this trial's?)") from exc

    @staticmethod
    def _handshake(sock: socket.socket, number: int, key: bytes) -> Connection:
        challenge = _read_exact(sock, NONCE)
        mine = os.urandom(NONCE)
        sock.sendall(_mac(key, b"spoke", challenge) + mine + struct.pack("!I", number))
        if not hmac.compare_digest(_read_exact(sock, 32), _mac(key, b"hub", mine)):
            raise ExchangeError("the rank listening for this trial does not hold its key")
        return _to_connection(sock)

    def send(self, obj: Any) -> None:
        self._conn.send_bytes(pickle.dumps(obj))

    def recv(self) -> Any:
        try:
            return pickle.loads(self._conn.recv_bytes())
        except EOFError as exc:
            raise ExchangeError("the chief went away during a collective") from exc

    def close(self) -> None:
        self._conn.close()


def _clear_stale(path: str) -> None:
    """Remove a socket left by an earlier run; refuse if a live run still listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
    raise ExchangeError(f"another run's ranks already meet at {path} (same chief address and "
                        "port): give this run another port (pub_port or "
                        "INTER_TRAIN_PROCESS_COMM_PORT_1)")


def local_socket_path(chief_ip: str, port: int, node: int | str) -> str:
    """Where a node's local chief listens: a private directory of this user, one socket per
    (trial port, node), so trials and simulated nodes do not meet."""
    name = hashlib.sha256(f"{chief_ip}:{port}:{node}".encode()).hexdigest()[:SOCKET_NAME - 5]
    return str(_private_dir() / f"{name}.sock")


def _private_dir() -> Path:
    """The first of these that is (or can be made) a directory of this user's that no one
    else may enter: under the temp dir (a trial's own on a cluster), else $XDG_RUNTIME_DIR,
    else the user's cache. Another user who made the temp dir's name first (its name is
    predictable in a shared /tmp) only moves the ranks to the next one, and so does a directory
    whose sockets' paths would not fit in a Unix socket address (108 bytes on Linux): every
    rank sees the same and picks the same."""
    uid = os.getuid()
    candidates = [Path(tempfile.gettempdir()) / f"dettui-dist-{uid}"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "dettui-dist")
    candidates.append(Path.home() / ".cache" / "dettui-dist")
    for base in candidates:
        if len(os.fsencode(base)) + 1 + SOCKET_NAME >= SUN_PATH:
            continue
        with contextlib.suppress(OSError):
            base.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                base.mkdir(mode=0o700)
            st = os.lstat(base)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077:
                return base
    raise ExchangeError("no private directory for this run's ranks to meet in (tried "
                        + ", ".join(str(c) for c in candidates) + "): each is another user's, "
                        f"open to others or longer than {SUN_PATH - SOCKET_NAME - 2} bytes")
