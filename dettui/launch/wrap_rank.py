"""`python -m dettui.launch.wrap_rank RANK -- CMD...`: prefix each output line with `[rank=N] `.

RANK is a number or a comma-separated list of environment variable names tried in order
(horovod: HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK). Output is split on \\r and \\n; signals
are forwarded to the child; the exit code is the child's.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

MAX_LINE = 8191
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGWINCH)


def resolve_rank(spec: str, env: dict[str, str]) -> int:
    """A number, or the first of the named environment variables that is set."""
    if re.fullmatch(r"\d+", spec):
        return int(spec)
    for name in spec.split(","):
        value = env.get(name.strip())
        if value is not None and value.strip().isdigit():
            return int(value)
    raise ValueError(f"rank not found: none of {spec} is set to a number")


def prefix_lines(data: bytes, rank: int, rest: bytes = b"") -> tuple[bytes, bytes]:
    """Complete lines of `rest + data`, each as `[rank=N] line\\n`; and the unfinished rest."""
    pieces = re.split(rb"[\r\n]", rest + data)
    tail = pieces.pop()
    out = bytearray()
    tag = f"[rank={rank}] ".encode()
    for piece in pieces:
        for start in range(0, max(len(piece), 1), MAX_LINE):
            out += tag + piece[start:start + MAX_LINE] + b"\n"
    return bytes(out), tail


def _pump(src: IO[bytes], dst: IO[bytes], rank: int) -> None:
    rest = b""
    while True:
        chunk = os.read(src.fileno(), 65536)
        if not chunk:
            break
        out, rest = prefix_lines(chunk, rank, rest)
        if out:
            dst.write(out)
            dst.flush()
    if rest:
        out, _ = prefix_lines(b"\n", rank, rest)
        dst.write(out)
        dst.flush()


def run(rank: int, cmd: Sequence[str]) -> int:
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    assert proc.stdout is not None and proc.stderr is not None
    threads = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, rank)),
               threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, rank))]
    for t in threads:
        t.start()
    code = proc.wait()
    for t in threads:
        t.join()
    return code if code >= 0 else 128 - code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dettui.launch.wrap_rank",
        description="Prefix every output line of CMD with [rank=N].")
    parser.add_argument("rank", help="a number, or env var names separated by commas")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given")
    try:
        rank = resolve_rank(args.rank, dict(os.environ))
    except ValueError as exc:
        print(f"wrap_rank: {exc}", file=sys.stderr)
        return 1
    return run(rank, cmd)


if __name__ == "__main__":
    sys.exit(main())
