"""`python -m dettui.launch.worker -- SCRIPT...`: one rank under torchrun.

Tags output with `[rank=N] ` (like wrap_rank), records the script's exit code where the launcher
watches for it, and ends the script if the launcher disappears (even by SIGKILL), so no worker
outlives its launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from dettui.launch import wrap_rank

LAUNCH_DIR = "DETTUI_LAUNCH_DIR"
LAUNCHER_PID = "DETTUI_LAUNCHER_PID"


def exit_file(launch_dir: Path, rank: int) -> Path:
    return launch_dir / f"rank-{rank}.exit"


def _watch_launcher(pid: int) -> None:
    while True:
        time.sleep(0.5)
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            me = psutil.Process()
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
            os._exit(137)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    script = args[1:] if args[:1] == ["--"] else args
    if not script:
        print("worker: no script given", file=sys.stderr)
        return 2
    rank = int(os.environ.get("RANK", "0"))
    launcher = os.environ.get(LAUNCHER_PID)
    if launcher:
        threading.Thread(target=_watch_launcher, args=(int(launcher),), daemon=True).start()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = wrap_rank.run(rank, script)
    ended = time.time()
    launch_dir = os.environ.get(LAUNCH_DIR)
    if launch_dir:
        path = exit_file(Path(launch_dir), rank)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{code} {ended}")
        tmp.replace(path)
    return code


if __name__ == "__main__":
    sys.exit(main())
