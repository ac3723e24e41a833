"""The rendezvous ports the master gives trials that span agents: outside Linux's ephemeral
range (a client socket of any process may hold a port in it: a DDP trial failed with
EADDRINUSE on 33988 while another suite ran), distinct over a whole walk, and a walk that
starts at random, so two masters on one host do not hand out the same ports in step."""

from __future__ import annotations

from dettui.master.cluster.scheduling import PORTS, PORTS_PER_ALLOCATION, first_port, next_port

EPHEMERAL = range(32768, 61000)  # Linux's default net.ipv4.ip_local_port_range


def test_a_whole_walk_stays_in_its_range_and_gives_each_allocation_its_own_ports() -> None:
    port = first_port()
    given = []
    for _ in range(len(PORTS) // PORTS_PER_ALLOCATION):
        port = next_port(port)
        given.append(port)
    used = [p + i for p in given for i in range(PORTS_PER_ALLOCATION)]  # the three after too
    assert len(set(used)) == len(used) == len(PORTS)
    assert all(p in PORTS and p not in EPHEMERAL for p in used)
    assert next_port(given[-1]) == given[0]  # it wraps around to where it began


def test_each_master_starts_its_walk_somewhere_else() -> None:
    starts = {first_port() for _ in range(50)}
    assert len(starts) > 1  # all 50 alike: 1 in 2,500**49
    assert all((s - PORTS.start) % PORTS_PER_ALLOCATION == 0 and s in PORTS for s in starts)
