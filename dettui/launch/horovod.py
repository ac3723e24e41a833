"""`python -m dettui.launch.horovod [HVD_OVERRIDES... --] (--trial T | SCRIPT...)` (deprecated
in Determined, kept so its entrypoints run): horovodrun over the allocation's nodes, each
worker wrapped with its rank. Without `horovodrun` installed it exits 1 saying how to install
it."""

from __future__ import annotations

import os
import sys

from dettui.launch import _external, spec


def build(argv: list[str], topo: spec.Topology, horovodrun: str) -> spec.Command:
    overrides, rest = spec.split_overrides([a for a in argv if a != "--autohorovod"])
    script = spec.script_of(rest, python=sys.executable)
    hosts = ",".join(f"{a}:{n}" for a, n in zip(topo.addresses, topo.slots_per_node,
                                                 strict=True))
    cmd = [horovodrun, "-np", str(sum(topo.slots_per_node)), "-H", hosts, *overrides,
           sys.executable, "-m", "dettui.launch.wrap_rank",
           "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK", "--", *script]
    return spec.Command(tuple(cmd), {"USE_HOROVOD": "1", "DET_CHIEF_IP": topo.addresses[0]})


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    horovodrun = _external.require("horovodrun", "horovod", "Horovod")
    try:
        cmd = build(args, spec.Topology.from_env(dict(os.environ)), horovodrun)
    except spec.LaunchArgsError as exc:
        print(f"horovod launcher: {exc}", file=sys.stderr)
        return exc.code
    return _external.run(cmd.argv, cmd.env)


if __name__ == "__main__":
    sys.exit(main())
