"""The trial's sandbox made with system calls, in a process the fork server just forked: the
same namespaces, mounts, user and capabilities as `sandbox.wrap`'s `unshare` + shell script +
`setpriv` (sandbox.py says what each is for), without starting those programs.

`Plan` is what `sandbox.plan` decides for a trial (it travels to the fork server as JSON);
`enter(plan)` runs in the freshly forked, single-threaded child and returns in the trial's
process. With namespaces the child unshares its mount and PID namespaces (and, for a non-root
agent, a user namespace mapping root to the agent's user), forks the namespace's init and stays
outside as the "intermediate" (`unshare --fork --kill-child`): it waits for the init and exits
as the init did (its code, or dying by its signal), and never returns from `enter`; the init,
killed with the intermediate (its parent-death signal), mounts its /proc, makes the mounts in
the order of `sandbox.SCRIPT`, becomes the trial's user without capabilities and returns.
A failure there is one line on stderr (`dettui sandbox: mount --rbind /x /y: Permission
denied`) and exit status 1, as the script's `set -e`.

Standard library and ctypes only: the fork server imports it next to torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NoReturn, TypeVar

NO_IDENTITY = "-"  # a bind that is not checked (the agent's own paths)
STAGE_PREFIX = "/tmp/.dettui-stage."  # + random: where kept paths wait (mktemp -d's)
RUN_STAGE = "/run/determined/.stage"  # where they wait once /run/determined exists
REFUSAL = "checkpoint storage {} changed while the trial started; refusing"

# <sys/mount.h>, <linux/sched.h>, <linux/prctl.h>, <linux/capability.h>
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522
T = TypeVar("T")
HELD = (signal.SIGINT, signal.SIGTERM)  # the intermediate holds them, as `unshare` does


@dataclass(frozen=True)
class Plan:
    """What `enter` makes of a forked process: see `sandbox.plan`, which builds it."""

    namespaces: bool  # new mount and PID namespaces, with the mounts below
    user_namespace: bool  # in a user namespace of their own (root mapped to the caller)
    hidden: tuple[str, ...] = ()  # covered by empty read-only tmpfs
    binds: tuple[tuple[str, str, str], ...] = ()  # (source, target, identity)
    kept: tuple[tuple[str, str], ...] = ()  # (path, identity): bound back over `hidden`
    private: tuple[str, ...] = ()  # own tmpfs each, when /run/determined exists
    cwd: str = "/"
    uid: int | None = None  # with gid and groups: the user to become (change_user)
    gid: int | None = None
    groups: tuple[int, ...] | None = None  # None: unchanged; (): cleared
    nproc: int | None = None  # RLIMIT_NPROC, soft and hard
    drop: bool = False  # no capabilities at all, and no_new_privs
    change_user: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))  # ASCII: a path's undecodable bytes as \udcXX

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """The plan `to_json` wrote (ValueError for anything else)."""
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) != set(cls.__dataclass_fields__):
            raise ValueError("not a sandbox plan: its fields differ")
        try:
            plan = cls(
                namespaces=_bool(data["namespaces"]),
                user_namespace=_bool(data["user_namespace"]),
                hidden=tuple(_str(h) for h in data["hidden"]),
                binds=tuple((_str(s), _str(t), _str(i)) for s, t, i in data["binds"]),
                kept=tuple((_str(k), _str(i)) for k, i in data["kept"]),
                private=tuple(_str(p) for p in data["private"]),
                cwd=_str(data["cwd"]), uid=_id(data["uid"]), gid=_id(data["gid"]),
                groups=None if data["groups"] is None else tuple(
                    _int(g) for g in data["groups"]),
                nproc=_id(data["nproc"]), drop=_bool(data["drop"]),
                change_user=_bool(data["change_user"]))
        except (TypeError, KeyError) as exc:
            raise ValueError(f"not a sandbox plan: {exc}") from exc
        if plan.change_user and (plan.uid is None or plan.gid is None):
            raise ValueError("not a sandbox plan: a user change without its uid and gid")
        return plan


def _bool(x: Any) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{x!r} is not a boolean")
    return x


def _str(x: Any) -> str:
    if not isinstance(x, str) or "\0" in x:
        raise TypeError(f"{x!r} is not a path")
    return x


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise TypeError(f"{x!r} is not an id")
    return x


def _id(x: Any) -> int | None:
    return None if x is None else _int(x)


# --- system calls -----------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc: no ldconfig lookup
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _path(p: str | None) -> bytes | None:
    return None if p is None else os.fsencode(p)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None,
          what: str) -> None:
    _check(_libc.mount(_path(source), _path(target), _path(fstype), flags, _path(data)), what)


def umount_lazy(target: str) -> None:
    _check(_libc.umount2(_path(target), MNT_DETACH), f"umount -l {target}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(fd, nstype), "setns")


class PidNamespaces:
    """A root fork server's way to fork each child straight into a PID namespace of its own
    (`fork_into`), the child its init: one fork and one process fewer than unsharing in the
    child, which must fork again to have a process in the namespace. After each fork the
    server's children are set back to its own namespace (setns). `usable` is False where
    the server may not (not root: the child's user namespace is needed first)."""

    def __init__(self) -> None:
        self.fd = -1
        self.broken: str | None = None  # why the server's children could not be set back
        if os.geteuid() != 0 or not self._probe():
            return
        try:
            self.fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.fd = -1

    @staticmethod
    def _probe() -> bool:
        """Whether unshare and setns back both work here, tried in a throwaway child: where
        only the first does (root of a user namespace that does not own this PID namespace),
        trying it in the server would leave every later child in an empty namespace."""
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
                unshare(CLONE_NEWPID)
                setns(fd, CLONE_NEWPID)
                code = 0
            except BaseException:  # noqa: BLE001, S110 - any failure: not usable
                pass
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    @property
    def usable(self) -> bool:
        return self.fd >= 0 and self.broken is None

    def fork_into(self) -> int:
        """fork(), the child the init of a new PID namespace (OSError: none was made)."""
        unshare(CLONE_NEWPID)
        try:
            pid = os.fork()
        except OSError:
            self._back()
            raise
        if pid:
            self._back()
        return pid

    def _back(self) -> None:
        """The server's next children in its own namespace again. A server that cannot set
        that back must fork nothing more (every child would go into that namespace):
        `broken` says why, and the server goes stale, serving the trials it has."""
        try:
            setns(self.fd, CLONE_NEWPID)
        except OSError as exc:
            self.broken = f"setns back to its PID namespace failed: {exc}"


def prctl(option: int, arg: int, what: str) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), what)


def capset_none() -> None:
    """Empty effective, permitted and inheritable sets (dropping is always allowed)."""
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


# --- enter ------------------------------------------------------------------------------------


def enter(plan: Plan, parent: int | None = None, init: bool = False) -> None:
    """Make this freshly forked process the trial's, as `plan` says; return in the trial's
    process (with namespaces: the child of the new PID namespace's init, which stays root).
    `parent` (default: this process's parent now) is the process whose death must end this
    one."""
    if init:  # forked into a PID namespace already (PidNamespaces), its death signal armed
        _as_init(plan)
        return
    try:
        if not plan.namespaces:
            _become(plan, rearm=None)
            return
        expected = os.getppid() if parent is None else parent
        _arm_death_signal(lambda: os.getppid() != expected)
        _unshare(plan)
        # the init's parent is outside its PID namespace (getppid() is 0 there): the end of
        # this pipe's writing side tells it that the intermediate is gone
        lifeline_read, lifeline_write = _step(os.pipe, "pipe")
        held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
        pid = _step(os.fork, "fork")
    except Exception as exc:  # noqa: BLE001 - a failure is the trial's exit status 1
        _fail(exc)
    if pid:
        os.close(lifeline_read)
        _intermediate(pid)  # never returns
    try:
        os.close(lifeline_write)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)

        lifeline = select.poll()  # (not select(): the fork server's fds may pass 1023)
        lifeline.register(lifeline_read, select.POLLIN)

        def orphaned() -> bool:
            return bool(lifeline.poll(0))

        _arm_death_signal(orphaned)
        _mount_proc()
        _mounts(plan)
        os.close(lifeline_read)
    except Exception as exc:  # noqa: BLE001 - as above
        _fail(exc)
    # The namespace's init stays this process, root and running nothing of the trial's, as
    # the script's shell does for a fresh trial: the trial, its child, is not pid 1 (which
    # the kernel shields from every signal it has no handler for, its own
    # os.kill(os.getpid(), 9) included), and it can neither signal, trace nor disarm the
    # init whose end (with the intermediate's, with the agent's) ends the namespace.
    _fork_trial(plan)


def _as_init(plan: Plan) -> None:
    """The init of a PID namespace its parent forked it into: a mount namespace of its own,
    /proc, the mounts, then the trial forked and waited for, as `enter` does after its fork."""
    try:
        unshare(CLONE_NEWNS)
        _mount_proc()
        _mounts(plan)
    except Exception as exc:  # noqa: BLE001 - as in enter
        _fail(exc)
    _fork_trial(plan)


def _fork_trial(plan: Plan) -> None:
    """In the namespace's init, its mounts made: fork the trial, which returns as the trial's
    user; the init waits for it and never returns (`_init`)."""
    try:
        trial = _step(os.fork, "fork")
    except Exception as exc:  # noqa: BLE001 - as in enter
        _fail(exc)
    if trial:
        _init(trial)  # never returns
    try:
        _become(plan, rearm=lambda: os.getppid() != 1)
    except Exception as exc:  # noqa: BLE001 - as above
        _fail(exc)


def arm_death_signal(lifeline: int) -> None:
    """SIGKILL when the parent (the fork server) dies; exit now if it has already: `lifeline`
    is the reading end of a pipe whose writing end only the parent holds (a child in a PID
    namespace of its own cannot ask getppid())."""
    poll = select.poll()
    poll.register(lifeline, select.POLLIN)
    _arm_death_signal(lambda: bool(poll.poll(0)))


def _fail(exc: Exception) -> NoReturn:
    """The script's `set -e`: one line naming the step that failed, and exit status 1."""
    if isinstance(exc, OSError) and exc.strerror:
        what = exc.strerror if exc.filename is None else f"{exc.filename}: {exc.strerror}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    _say(f"dettui sandbox: {what}")
    os._exit(1)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, os.fsencode(line) + b"\n")


def _arm_death_signal(orphaned: Callable[[], bool]) -> None:
    """SIGKILL when the parent dies; if it died before this (`orphaned()`), exit at once."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, "prctl PR_SET_PDEATHSIG")
    if orphaned():
        os._exit(1)


def _unshare(plan: Plan) -> None:
    """New mount and PID namespaces; for a non-root agent inside a user namespace in which
    root is the agent's user (`unshare --user --map-root-user`)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | (CLONE_NEWUSER if plan.user_namespace else 0)
    unshare(flags)
    if plan.user_namespace:
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/gid_map", f"0 {gid} 1")


def _write(path: str, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise OSError(exc.errno, f"write {path}: {exc.strerror}") from exc


def _intermediate(pid: int) -> NoReturn:
    """Outside the namespace: wait for its init and end as it did (a code, or its signal),
    holding SIGINT and SIGTERM meanwhile, as `unshare --fork` does."""
    try:
        for sig in signal.valid_signals():  # the fork server's handlers are not this one's
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        while True:
            got, status = os.waitpid(pid, 0)
            if got == pid and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
                break
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        sig = os.WTERMSIG(status)
        # the signal again, on this process: its wait status is what the agent reads; no
        # core of this (the fork server's) memory, which holds nothing of the trial's
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(
            resource.RLIMIT_CORE)[1]))
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        _say(f"dettui sandbox: the trial ended by signal {sig}, which this process survived")
    except BaseException as exc:  # noqa: BLE001 - nothing may return from here
        _say(f"dettui sandbox: waiting for the trial: {exc}")
    os._exit(1)


def _init(pid: int) -> NoReturn:
    """Pid 1 of the namespace: reap what is orphaned there, and end as the trial did, a
    signal as 128+n (as `sh -c` ends after its command)."""
    try:
        for sig in signal.valid_signals():  # the fork server's handlers are not this one's
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        while True:
            try:
                got, status = os.waitpid(-1, 0)
            except InterruptedError:
                continue
            if got == pid:
                code = os.waitstatus_to_exitcode(status)
                if code < 0 and -code not in (signal.SIGINT, signal.SIGPIPE):
                    _say(signal.strsignal(-code) or f"signal {-code}")  # as sh says it
                os._exit(code if code >= 0 else 128 - code)
    except BaseException as exc:  # noqa: BLE001 - nothing may return from here
        _say(f"dettui sandbox: waiting for the trial: {exc}")
    os._exit(1)


def _mount_proc() -> None:
    """The init's first mounts, `unshare --mount-proc`'s: every mount private (no mount
    reaches the host's namespace), and a /proc of the new PID namespace."""
    mount("none", "/", None, MS_REC | MS_PRIVATE, None, "mount --make-rprivate /")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, None,
          "mount -t proc proc /proc")


def _mounts(plan: Plan) -> None:
    """`sandbox.SCRIPT`'s steps, in its order."""
    stage = _stage_dir()
    _tmpfs("dettui-stage", stage, "mode=0700,size=64k")
    for source, target, identity in plan.binds:
        try:
            os.makedirs(target, exist_ok=True)
        except OSError:
            if not target.startswith("/run/"):
                continue  # outside /run, a target that cannot be made is skipped
            _open_run(stage)
            _makedirs(target)
        _rbind(source, target)
        _same(target, identity, source)
    _unstage(stage)
    private: tuple[str, ...] = ()
    if os.path.isdir("/run/determined"):  # kept paths wait outside /tmp (a test's cwd)
        stage = RUN_STAGE
        _makedirs(stage)
        private = plan.private
    else:
        stage = _stage_dir()
    _tmpfs("dettui-stage", stage, "mode=0700,size=64k")
    for i, (path, identity) in enumerate(plan.kept, 1):
        _makedirs(f"{stage}/{i}")
        _rbind(path, f"{stage}/{i}")
        _same(f"{stage}/{i}", identity, path)
    for h in plan.hidden:
        _tmpfs("dettui-hidden", h, "mode=0755,size=64k")
    for p in private:
        if os.path.isdir(p):
            _tmpfs("dettui-private", p, "mode=1777", MS_NOSUID | MS_NODEV)
    for i, (path, _identity) in enumerate(plan.kept, 1):
        _makedirs(path)
        _rbind(f"{stage}/{i}", path)
    for h in plan.hidden:
        with contextlib.suppress(OSError):
            mount(None, h, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None,
                  f"mount -o remount,ro,bind {h}")
    _unstage(stage)
    _step(lambda: os.chdir(plan.cwd), f"cd {plan.cwd}")


def _stage_dir() -> str:
    """A new directory only root reads, as `mktemp -d /tmp/.dettui-stage.XXXXXX` makes."""
    for _ in range(100):
        path = STAGE_PREFIX + os.urandom(6).hex()
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise OSError(exc.errno, f"mktemp -d {STAGE_PREFIX}XXXXXX: {exc.strerror}") from exc
    raise OSError(0, f"mktemp -d {STAGE_PREFIX}XXXXXX: no free name")


def _unstage(stage: str) -> None:
    umount_lazy(stage)
    with contextlib.suppress(OSError):
        os.rmdir(stage)


def _makedirs(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"mkdir -p {path}: {exc.strerror}") from exc


def _tmpfs(name: str, target: str, options: str, flags: int = 0) -> None:
    mount(name, target, "tmpfs", flags, options, f"mount -t tmpfs -o {options} {name} {target}")


def _rbind(source: str, target: str) -> None:
    mount(source, target, None, MS_BIND | MS_REC, None, f"mount --rbind {source} {target}")


def _same(bound: str, identity: str, source: str) -> None:
    """The trial refused when what was bound at `bound` is not the directory the agent checked
    (`identity`, st_dev:st_ino; NO_IDENTITY: unchecked): a link or directory swapped since."""
    if identity == NO_IDENTITY:
        return
    st = _step(lambda: os.stat(bound), f"stat {bound}")
    if f"{st.st_dev}:{st.st_ino}" == identity:
        return
    with contextlib.suppress(OSError):
        umount_lazy(bound)
    _say(REFUSAL.format(source))
    os._exit(1)


def _open_run(stage: str) -> None:
    """/run is not writable here: a tmpfs over it, its entries bound back (links made again)."""
    old = f"{stage}/run"
    _makedirs(old)
    _rbind("/run", old)
    _tmpfs("dettui-run", "/run", "mode=0755")
    for name in sorted(os.listdir(old)):
        if name.startswith(".."):  # the script's globs, * and .[!.]*, leave these out
            continue
        entry, back = f"{old}/{name}", f"/run/{name}"
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            _step(lambda e=entry, b=back: os.symlink(os.readlink(e), b), f"ln -s {back}")
            continue
        if os.path.isdir(entry):
            _step(lambda b=back: os.mkdir(b), f"mkdir {back}")
        else:
            _step(lambda b=back: os.close(os.open(b, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                                                  0o644)), f": > {back}")
        with contextlib.suppress(OSError):
            _rbind(entry, back)


def _step(fn: Callable[[], T], what: str) -> T:
    """`fn()`, an OSError from it naming `what` (the command the script ran for it)."""
    try:
        return fn()
    except OSError as exc:
        raise OSError(exc.errno, f"{what}: {exc.strerror}") from exc


def _become(plan: Plan, rearm: Callable[[], bool] | None) -> None:
    """`prlimit` and `setpriv`'s part: the process limit, the user, its groups, no
    capabilities (an empty bounding set: not even a root trial user gets any at exec),
    no_new_privs, the parent-death signal armed again (a credential change clears it), the
    work dir and umask 077. `rearm` tells, after arming it, whether the parent has died
    already (None: the parent is the process that forked this one)."""
    if not plan.namespaces:  # as the agent's spawn does, before the user changes
        _step(lambda: os.chdir(plan.cwd), f"cd {plan.cwd}")
    if plan.change_user and plan.nproc:
        nproc = plan.nproc
        _step(lambda: resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc)),
              f"prlimit --nproc={nproc}:{nproc}")
    if plan.drop:
        for cap in range(_last_cap() + 1):  # needs CAP_SETPCAP: before the user changes
            prctl(PR_CAPBSET_DROP, cap, f"prctl PR_CAPBSET_DROP {cap}")
    parent = os.getppid()
    if plan.change_user:
        assert plan.uid is not None and plan.gid is not None
        _step(lambda: os.setgroups(list(plan.groups or ())), "setgroups")
        _step(lambda: os.setresgid(plan.gid, plan.gid, plan.gid), f"setresgid {plan.gid}")
        _step(lambda: os.setresuid(plan.uid, plan.uid, plan.uid), f"setresuid {plan.uid}")
    if plan.drop:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "prctl PR_CAP_AMBIENT_CLEAR_ALL")
        capset_none()
        prctl(PR_SET_NO_NEW_PRIVS, 1, "prctl PR_SET_NO_NEW_PRIVS")
    if rearm is not None:
        _arm_death_signal(rearm)
    elif plan.change_user:
        _arm_death_signal(lambda: os.getppid() != parent)
    os.umask(0o077)


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError) as exc:
        raise OSError(getattr(exc, "errno", 0) or 0,
                      f"read /proc/sys/kernel/cap_last_cap: {exc}") from exc

