"""`dettui` with no command: the dashboard. Without `--master` it uses the master of its state
dir: the one already running there (found through the state dir's lock), else one it starts in
the background (`dettui serve --background`: its own session, its output in the state dir's
master.log), so the UI never shares a process with the master and its trials. The dashboard
is an API client either way, fed by the master's push stream."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.signal import Signal
from textual.worker import WorkerFailed

from dettui import auth, master_address, statedir, terminal_text
from dettui import client as api
from dettui.errors import DettuiError, MasterUnreachable, PermissionDenied
from dettui.screens.cluster import ClusterScreen
from dettui.screens.connection import Connection, Outage
from dettui.screens.experiments import ExperimentsScreen
from dettui.screens.guard import describe
from dettui.screens.help import HelpScreen, describe_keys
from dettui.screens.palette import Actions
from dettui.screens.queue import QueueScreen
from dettui.screens.quit import (
    BACKGROUND,
    STOP,
    QuitScreen,
    StoppingScreen,
    Work,
    stopping_text,
    work_of,
)
from dettui.widgets.safe import clean, plain

log = logging.getLogger("dettui.dashboard")
START_SECONDS = 60.0  # for a master started in the background to listen
STOP_SECONDS = 30.0  # for an idle master to exit on SIGTERM


class Dashboard(App[None]):
    TITLE = "dettui"
    MODES: ClassVar[dict[str, Any]] = {  # type: ignore[misc]
        "queue": QueueScreen, "experiments": ExperimentsScreen, "cluster": ClusterScreen,
    }
    COMMANDS = App.COMMANDS | {Actions}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "section('queue')", "Queue"),
        Binding("2", "section('experiments')", "Experiments"),
        Binding("3", "section('cluster')", "Cluster"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+q", "quit", "Quit", show=False),
    ]

    def __init__(self, master: str, state_dir: Path, *,
                 local: statedir.Holder | None = None, user: str | None = None,
                 note: str | None = None) -> None:
        super().__init__()
        self.master = master
        self.user = user  # -u: act as this user (default: the CLI's logged-in user)
        self.note = note  # which master is used, when that is not the obvious one
        self.state_dir = state_dir
        self.local = local  # the master of this state dir, when that is the one used
        self.client: api.Client | None = None
        self.errors: list[BaseException] = []  # reported, for tests to look at
        self.failure: DettuiError | None = None  # why the dashboard ended early
        self.farewell = ""  # printed after the dashboard has left the terminal
        self._last_error: tuple[str, float] = ("", 0.0)
        self._hold: statedir.DashboardLock | None = None
        self.shown_screen: Any = None  # the last section screen shown (toasts stay with it)
        # The screens' feeds report their streams here; each screen follows the signal (a
        # banner, stale rows, a fresh read when the master is back).
        self.connection = Connection(master, self._connection_changed)
        self.connection_changed: Signal[tuple[Outage | None, bool]] = Signal(
            self, "connection-changed")

    async def on_mount(self) -> None:
        try:
            self.client = await self.connect()
        except DettuiError as exc:
            self.failure = exc
            self.exit(return_code=1)
            return
        if self.local is not None:
            self._hold = statedir.DashboardLock(self.state_dir)
        await self.switch_mode("queue")

    async def connect(self) -> api.Client:
        """The API client, signed in as the CLI is (its saved login, else Determined's default
        `determined`), so what the dashboard creates the CLI controls, and the other way
        round. The header names the master and the user."""
        client = await auth.authenticated(self.master, self.user)
        try:
            name = str((await client.me()).get("username", ""))
        except DettuiError:
            await client.close()
            raise
        self.who = name
        self._show_identity()
        if self.note:
            self.notify(self.note, title="which master", timeout=20)
        return client

    def _show_identity(self) -> None:
        """The header: `URL (pid N) as USER` (the pid of this state dir's master)."""
        pid = f" (pid {self.local.pid})" if self.local is not None else ""
        self.sub_title = f"{self.master}{pid} as {self.who}"

    def _connection_changed(self, outage: Outage | None, came_back: bool) -> None:
        if outage is not None:
            log.warning("%s", outage.text())
        elif came_back:
            log.warning("the master at %s answers again", self.master)
            self._reread_local()
        self.connection_changed.publish((outage, came_back))

    def _reread_local(self) -> None:
        """The master came back: a restarted one has another pid (the state dir's lock says
        which); the header and the quit dialog name the new one."""
        if self.local is None:
            return
        try:
            found = master_address.local_holder(self.state_dir, wait=0)
        except (OSError, DettuiError):
            return
        if found is not None and found.url == self.local.url and found != self.local:
            self.local = found
            self._show_identity()

    def format_title(self, title: str, sub_title: str) -> Any:
        return super().format_title(clean(title), clean(sub_title))

    # -- errors: a bug in a screen is a toast and a log entry, never the end --------------

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every toast is plain text: messages carry user text (names, paths, log lines)."""
        super().notify(clean(message, newlines=True), title=clean(title), severity=severity,
                       timeout=timeout, markup=False)

    def action_help_quit(self) -> None:
        """Ctrl+C does not quit (it copies): say which keys do, in plain words (Textual's own
        hint is markup, which the plain-text toasts showed as `[b]ctrl+q[/b]`)."""
        keys = sorted({key for key, active in self.active_bindings.items()
                       if active.binding.action in ("quit", "app.quit")})
        if keys:
            self.notify(f"Press {' or '.join(keys)} to quit the dashboard",
                        title="Do you want to quit?")

    def report_error(self, error: BaseException) -> None:
        if isinstance(error, WorkerFailed):
            error = error.error
        self.errors.append(error)
        log.error("dashboard error (the dashboard goes on)", exc_info=error)
        text, now = describe(error), time.monotonic()
        if self._last_error[0] == text and now - self._last_error[1] < 5:
            return  # the same error again and again: logged, not toasted each time
        self._last_error = (text, now)
        self.notify(f"{text}\nThe master and the trials are not affected; details in "
                    f"{self.state_dir / 'dettui.log'}", title="dashboard error",
                    severity="error", timeout=10)

    def _handle_exception(self, error: Exception) -> None:
        if not self.is_running:
            super()._handle_exception(error)
            return
        self.report_error(error)

    async def _dispatch_message(self, message: Message) -> None:
        try:
            await super()._dispatch_message(message)
        except Exception as exc:  # noqa: BLE001 - reported; the app goes on
            self.report_error(exc)

    # -- navigation and help --------------------------------------------------------------

    async def action_section(self, mode: str) -> None:
        """Go to a section's own screen (its list), not to whatever was open in it."""
        if self.current_mode == mode:
            while len(self.screen_stack) > 1:
                self.pop_screen()
            return
        await self.switch_mode(mode)
        while len(self.screen_stack) > 1:
            self.pop_screen()

    def section_shown(self, screen: Any) -> None:
        """A screen of a section is shown: toasts about another one go."""
        if screen is not self.shown_screen:
            if self.shown_screen is not None:
                self.clear_notifications()
            self.shown_screen = screen

    def action_help(self) -> None:
        from dettui.widgets.rowtable import RowTable

        screen = self.screen
        note = None
        if any(isinstance(b, Binding) and b.action == "filter"
               for b in getattr(screen, "BINDINGS", [])):
            note = plain("Filter (/)\n  any text matches any cell; column:text matches one "
                         "column,\n  by key or title: state:queued pool:gpu user:alice\n"
                         "  a comparison compares its number: lr>0.01 loss<=0.5 steps!=4\n"
                         "  every word must hold; Escape clears the text, a second Escape "
                         "closes the box\n", newlines=True)
        text = describe_keys(
            (f"{type(screen).__name__.removesuffix('Screen')} screen",
             list(getattr(screen, "BINDINGS", []))),
            ("Tables", list(RowTable.BINDINGS)),
            ("Everywhere", [b for b in self.BINDINGS if isinstance(b, Binding)
                            and b.action != "command_palette"]
             + [Binding("ctrl+p", "command_palette", "Command palette: every action")]),
            note=note)
        self.push_screen(HelpScreen(text))

    # -- quitting ---------------------------------------------------------------------------

    async def action_quit(self) -> None:
        self.run_worker(self._quit(), group="quit", exclusive=True)

    async def _quit(self) -> None:
        """A master of another kind (`dettui serve`, `--master URL`) goes on as it was. One
        this dashboard's state dir started in the background stops with the last dashboard
        when idle; with work running, the user chooses."""
        local = self.local
        if local is None or local.mode != statedir.BACKGROUND or self._hold is None:
            self.exit()
            return
        if not self._hold.last():
            self._hold = statedir.DashboardLock(self.state_dir)
            self.farewell = (f"The master at {local.url} goes on for the other dashboard(s) "
                             "attached to it.")
            self.exit()
            return
        try:
            work = await self.work()
        except DettuiError as exc:
            self.notify(exc.message, title="cannot tell what runs", severity="error")
            work = Work(0, (), 0, 0)
        if not work.any:
            await self._stop(signal.SIGTERM, STOP_SECONDS)
            self.exit()
            return
        choice = await self.push_screen_wait(QuitScreen(work, local.url, local.pid))
        if choice == BACKGROUND:
            self.farewell = (f"The master goes on in the background at {local.url} "
                             f"(pid {local.pid}) with {work.summary()}. `dettui --state-dir "
                             f"{self.state_dir}` attaches to it again; `dettui serve --stop "
                             f"--state-dir {self.state_dir}` stops it.")
            self.exit()
        elif choice == STOP:
            await self._stop(signal.SIGUSR1, None)
            self.exit()
        else:
            self._hold = statedir.DashboardLock(self.state_dir)

    async def work(self) -> Work:
        assert self.client is not None
        tasks = await self.client.tasks()
        jobs = await self.client.jobs()
        local_agent = next((a["id"] for a in await self.client.agents()
                            if str(a["id"]).endswith("-local")), "")
        return work_of(tasks, jobs, local_agent)

    async def _stop(self, sig: int, timeout: float | None) -> None:
        """Signal the local master and wait until it has let go of the state dir, showing how
        many trials are still running."""
        assert self.local is not None
        why = self.local.ours()
        if why is not None:  # the pid of a lock file is signalled only if it is our master
            self.farewell = f"Not stopping the master (pid {self.local.pid}): {why}."
            return
        screen = StoppingScreen()
        await self.push_screen(screen)
        try:
            os.kill(self.local.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (timeout or 3600.0)
        while await asyncio.to_thread(statedir.holder, self.state_dir, 0) is not None:
            if time.monotonic() > deadline:
                self.farewell = f"The master (pid {self.local.pid}) did not stop in time."
                return
            try:
                screen.progress(stopping_text((await self.work()).running))
            except DettuiError:
                screen.progress("Stopping: the master is exiting…")
            await asyncio.sleep(0.5)
        reap()
        self.farewell = f"The master at {self.local.url} has stopped."

    async def on_unmount(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self._hold is not None:
            self._hold.release()


# -- starting: find or start the state dir's master --------------------------------------------

_spawned: list[subprocess.Popen[bytes]] = []


def reap() -> None:
    """Collect the exit of a master this process started (so it leaves no zombie)."""
    for proc in list(_spawned):
        if proc.poll() is not None:
            _spawned.remove(proc)


def _holder(state_dir: Path, wait: float = 10.0) -> statedir.Holder | None:
    """The state dir's running master (its lock believed only if this user's, its URL only if
    of this host); a state dir of another user is an error."""
    try:
        return master_address.local_holder(state_dir, wait=wait)
    except statedir.Untrusted as exc:
        raise PermissionDenied(f"{exc.message}; the dashboard runs a master in a state dir of "
                               "your own: give one with --state-dir") from exc


def ensure_master(state_dir: Path, *, port: int, slots: int | None) -> statedir.Holder:
    """The master of `state_dir`: the running one, else one started in the background."""
    found = _holder(state_dir)
    if found is not None:
        return found
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    logfile = state_dir / "master.log"
    # -P: the working directory is not on the master's sys.path (an html.py or yaml.py there
    # would be imported by it)
    cmd = [sys.executable, "-P", "-m", "dettui.cli", "serve", "--background", "--state-dir",
           str(state_dir), "--port", str(port)]
    if slots is not None:
        cmd += ["--agent-slots", str(slots)]
    with _own_file(logfile, "ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
    _spawned.append(proc)  # before anything a Ctrl-C can interrupt: abandon_start stops it
    print(f"starting the master of {state_dir} (its log: {logfile})", file=sys.stderr,
          flush=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        found = _holder(state_dir, wait=0.2)
        if found is not None:
            return found
        if proc.poll() is not None:
            found = _holder(state_dir, wait=1.0)  # another dashboard won the race
            if found is not None:
                return found
            raise MasterUnreachable(f"the master did not start (exit code {proc.returncode}): "
                                    f"{_last_line(logfile)} (all of it in {logfile})")
        time.sleep(0.1)
    raise MasterUnreachable(f"the master did not start in {START_SECONDS:.0f} s; see {logfile}")


def abandon_start(state_dir: Path, timeout: float = 20.0) -> None:
    """Ctrl-C before the dashboard opened: the master this process was starting stops (with
    SIGUSR1: a master not yet listening exits at once, one that is lets any trial checkpoint
    first, as `dettui serve --stop`); said on stderr, and what is left if it does not."""
    for proc in [p for p in _spawned if p.poll() is None]:
        print(f"\nCtrl-C: stopping the master this dashboard was starting (pid {proc.pid})",
              file=sys.stderr, flush=True)
        try:
            proc.send_signal(signal.SIGUSR1)
            proc.wait(timeout)
            print("the master has stopped", file=sys.stderr)
        except subprocess.TimeoutExpired:
            print(f"a master is still running in the background (pid {proc.pid}, state dir "
                  f"{state_dir}); `dettui serve --stop --state-dir {state_dir}` stops it",
                  file=sys.stderr)
        except KeyboardInterrupt:
            print(f"a master may still run in the background (pid {proc.pid}, state dir "
                  f"{state_dir}); `dettui serve --stop --state-dir {state_dir}` stops it",
                  file=sys.stderr)
        reap()


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


async def _probe(url: str, user: str | None) -> None:
    client = await auth.authenticated(url, user)
    await client.close()


def run_dashboard(args: argparse.Namespace) -> int:
    """The master is -m or $DET_MASTER when given (as for every command), else the state
    dir's, started when none runs; a different port than 8080 is said (stderr, and a
    notification in the dashboard)."""
    state_dir = args.state_dir or statedir.default_dir()
    try:
        statedir.check_dir(state_dir)
    except statedir.Untrusted as exc:
        raise PermissionDenied(f"the state dir {state_dir} is not yours alone ({exc.why}); give "
                               "one of your own with --state-dir") from exc
    _log_to_file(state_dir / "dettui.log")
    local, note = None, None
    url = master_address.explicit(args.master)
    try:
        if url is None:
            local = ensure_master(state_dir, port=args.port, slots=args.agent_slots)
            url, note = local.url, master_address.note_for(local.url, state_dir)
            if note:
                print(terminal_text.message(note), file=sys.stderr, flush=True)
        asyncio.run(_probe(url, args.user))  # unreachable: one line on stderr, no traceback
    except KeyboardInterrupt:
        abandon_start(state_dir)
        raise
    app = Dashboard(url, state_dir, local=local, user=args.user, note=note)
    app.run()
    if app.failure is not None:
        raise app.failure
    if app.farewell:
        print(app.farewell)
    return app.return_code or 0


def _own_file(path: Path, mode: str) -> IO[Any]:
    """`path` opened to append (`mode` "a" or "ab"), never through a symbolic link and only if
    it is a file of this user's: a state dir's files are not followed elsewhere."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise PermissionDenied(f"{path} is not a file of this user's (uid {st.st_uid}); not "
                               "writing to it")
    return os.fdopen(fd, mode)


def _log_to_file(path: Path) -> None:
    """The terminal belongs to the dashboard: its log goes to a file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        stream = _own_file(path, "a")
    except OSError as exc:
        raise PermissionDenied(f"cannot write the dashboard's log {path}: {exc.strerror}") from exc
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
