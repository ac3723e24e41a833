"""`python -m dettui.launch.deepspeed [DEEPSPEED_ARGS... --] (--trial T | SCRIPT...)`.

Runs DeepSpeed's own launcher with a hostfile of the allocation's nodes; each worker is wrapped
so its lines carry `[rank=N] `. Without `deepspeed` installed it exits 1 saying how to install
it.
"""

from __future__ import annotations

import os
import sys
import tempfile

from dettui.launch import _external, spec


def build(argv: list[str], topo: spec.Topology, deepspeed: str,
          hostfile: str | None) -> spec.Command:
    overrides, rest = spec.split_overrides(argv)  # [DEEPSPEED_ARGS... --] SCRIPT
    script = spec.script_of(rest, python=sys.executable)
    cmd = [deepspeed, "--master_addr", topo.addresses[0], "--master_port", str(topo.port)]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    else:
        cmd += ["--num_gpus", str(topo.nproc)]
    cmd += [*overrides, "--no_python", "--no_local_rank", sys.executable, "-m",
            "dettui.launch.wrap_rank", "RANK", "--", *script]
    return spec.Command(tuple(cmd), {"USE_DEEPSPEED": "1", "DET_CHIEF_IP": topo.addresses[0]})


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    deepspeed = _external.require("deepspeed", "deepspeed", "DeepSpeed")
    topo = spec.Topology.from_env(dict(os.environ))
    try:
        with tempfile.TemporaryDirectory(prefix="dettui-ds-") as tmp:
            hostfile = (_external.hostfile(topo, os.path.join(tmp, "hostfile"))
                        if topo.nnodes > 1 else None)
            cmd = build(args, topo, deepspeed, hostfile)
            return _external.run(cmd.argv, cmd.env)
    except spec.LaunchArgsError as exc:
        print(f"deepspeed launcher: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())
