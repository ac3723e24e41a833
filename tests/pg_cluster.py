"""A real, throwaway PostgreSQL for tests, from Debian's `postgresql` package: initdb and pg_ctl
as the `postgres` user (through runuser when we are root: PostgreSQL refuses to run as root),
listening only on 127.0.0.1 on a free port, fsync off, its data under a temp dir, stopped at
the end.

Each test takes a database with the store's schema and the rows of one migrated template, and
gives it back when it ends: emptied back to the template's rows (its other sessions ended first),
it goes to the next test. Copying a template (CREATE DATABASE) takes about 0.3 s on a loaded disk,
emptying one about 20 ms."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import stat
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dettui.master.store import pg

PACKAGE = "postgresql"
TEMPLATE = "dettui_template"


def bindir() -> Path | None:
    """Where initdb and pg_ctl are: Debian keeps them in /usr/lib/postgresql/<version>/bin."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    if versions:
        return versions[-1].parent
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


def missing() -> str | None:
    """Why a PostgreSQL cannot be started here, or None."""
    where = bindir()
    if where is None or not (where / "initdb").exists():
        return (f"PostgreSQL is not installed (no initdb, pg_ctl): install Debian's package "
                f"`{PACKAGE}` (the Makefile does it when run as root)")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return (f"there is no `postgres` user to run the test PostgreSQL as: install "
                    f"Debian's package `{PACKAGE}`")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    root: Path
    port: int = 0
    seed: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)  # template's rows
    free: list[str] = field(default_factory=list)  # databases given back, emptied

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _as_owner(self, *argv: str) -> list[str]:
        if os.geteuid() != 0:
            return list(argv)
        return ["runuser", "-u", "postgres", "--", *argv]

    def _tool(self, name: str, *args: str) -> None:
        binary = bindir()
        assert binary is not None
        subprocess.run(self._as_owner(str(binary / name), *args), check=True,
                       capture_output=True, timeout=60, cwd="/")

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:  # the postgres user must reach its data dir: traverse only
            shutil.chown(self.root, "postgres", "postgres")
            _let_others_through(self.root.parent)
        self.port = _free_port()
        self._tool("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off "
                   "-c full_page_writes=off -c autovacuum=off -c unix_socket_directories='' "
                   "-c max_connections=200")
        self._tool("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                   "-t", "60", "-o", options, "start")
        self._create(TEMPLATE, "template0")
        conn = pg.connect(self.url(TEMPLATE))  # migrated: each test's database copies it
        try:
            for (table,) in conn.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema()").fetchall():
                self.seed[table] = [tuple(r) for r in conn.execute(f"SELECT * FROM {table}")]
        finally:
            conn.close()

    def _create(self, name: str, template: str) -> None:
        admin = pg.Connection(self.url("postgres"))
        try:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            admin.close()

    def take_database(self) -> str:
        """A database with the store's schema and the template's rows, for one test."""
        if self.free:
            return self.free.pop()
        name = f"t_{uuid.uuid4().hex[:16]}"
        self._create(name, TEMPLATE)
        return name

    def give_back(self, name: str) -> None:
        """The test is done with `name`: its sessions end, its rows go back to the template's
        (identities restart), and the next test takes it."""
        conn = pg.Connection(self.url(name))
        try:
            conn.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                         "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            conn.execute("SET session_replication_role = replica")  # no foreign key checks
            for table, rows in self.seed.items():
                conn.execute(f"DELETE FROM {table}")
                for row in rows:
                    conn.execute(f"INSERT INTO {table} VALUES ({','.join('?' * len(row))})",
                                 row)
            for (sequence,) in conn.execute("SELECT sequencename FROM pg_sequences "
                                            "WHERE schemaname = current_schema()").fetchall():
                conn.execute(f"ALTER SEQUENCE {sequence} RESTART")
        finally:
            conn.close()
        self.free.append(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._tool("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")


def _let_others_through(path: Path) -> None:
    """Others may pass through (not list) `path` and its parents: pytest makes temp dirs 0700."""
    for d in (path, *path.parents):
        mode = d.stat().st_mode
        if mode & stat.S_IXOTH:
            return
        d.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
