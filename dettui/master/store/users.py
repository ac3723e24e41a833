"""Users, their passwords, their linked agent users, and their login sessions.

A password is kept as scrypt (N=2^14, r=8, p=5: OWASP's equivalent of N=2^17, 16 MiB and about
0.1 s a check) of what Determined's client sends (its salted SHA-512), with a random salt of
each user's own: two users with the same password have different stored hashes, and a stolen
database gives no password without the work of scrypt for each user. The form names its
parameters (`scrypt$N$r$p$salt$digest`), so they can grow. Hashes of older versions
(`pbkdf2$salt$digest`, PBKDF2-SHA256 at 20,000 rounds) still log in, and a successful login
replaces them (`needs_rehash`). An empty password is kept as '' (no password, as Determined's
EmptyPassword): it hides nothing, anyone may try it.

Hashing and checking are slow on purpose: routes run them off the event loop and off the store
thread (`offload.cpu`); store functions take the stored form, never compute it, except
`ensure_default_users` (once, at start).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import sqlite3
import time

from dettui.errors import Conflict, NotFound
from dettui.master.effects import NONE, Done, Effects
from dettui.master.store.records import AgentLink, User, columns
from dettui.master.store.tx import command, step, transaction

FROM_USERS = f"SELECT {columns(User.COLUMNS)} FROM users"

# Determined's client-side salt (authentication.salt_and_hash).
CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
SESSION_LIFETIME = 7 * 24 * 3600.0  # seconds a login lasts, as in Determined
SCRYPT = (2**14, 8, 5)  # N, r, p of new hashes
SCRYPT_MAXMEM = 64 * 1024 * 1024  # bytes scrypt may use: a stored form asking more is refused
MAX_HASHED = 1024  # characters of a client hash that are checked at all (bodies cap at 1024)
LEGACY_ROUNDS = 20_000  # PBKDF2-SHA256 rounds of the hashes before scrypt


def client_hash(password: str) -> str:
    """What Determined's client sends for `password` (empty stays empty)."""
    if password == "":
        return ""
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def _scrypt(hashed: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(hashed.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r, p=p,
                          maxmem=SCRYPT_MAXMEM, dklen=32)


def hash_password(hashed: str) -> str:
    """The stored form of client hash `hashed`, with a fresh salt ('' stays '': no password).
    Slow: call it off the event loop."""
    if hashed == "":
        return ""
    n, r, p = SCRYPT
    salt = os.urandom(16)
    return f"scrypt${n}${r}${p}${salt.hex()}${_scrypt(hashed, salt, n, r, p).hex()}"


def password_matches(stored: str, hashed: str) -> bool:
    """Whether client hash `hashed` is the password of stored form `stored` (either form).
    Slow: call it off the event loop. A malformed stored form matches nothing."""
    if stored == "" or hashed == "":
        return stored == hashed
    if len(hashed) > MAX_HASHED:
        return False
    kind, _, rest = stored.partition("$")
    try:
        if kind == "scrypt":
            n, r, p, salt, digest = rest.split("$")
            mine = _scrypt(hashed, bytes.fromhex(salt), int(n), int(r), int(p)).hex()
        elif kind == "pbkdf2":
            salt, digest = rest.split("$")
            mine = hashlib.pbkdf2_hmac("sha256", hashed.encode("utf-8", "surrogatepass"),
                                       bytes.fromhex(salt), LEGACY_ROUNDS).hex()
        else:
            return False
    except ValueError:
        return False
    return hmac.compare_digest(mine, digest)


def needs_rehash(stored: str) -> bool:
    """A stored form of an older kind or weaker parameters: replaced at the next login."""
    if stored == "":
        return False
    n, r, p = SCRYPT
    return not stored.startswith(f"scrypt${n}${r}${p}$")


@functools.cache
def decoy() -> str:
    """A stored form no one has: checked against when the user does not exist, so that a
    login takes as long for a wrong name as for a wrong password."""
    return hash_password(secrets.token_hex(16))


@command
def rehash(conn: sqlite3.Connection, user_id: int, old: str, new: str) -> Done[bool]:
    """Replace a user's stored form `old` by `new` (a login's upgrade); False if it changed
    meanwhile (a new password stays)."""
    with transaction(conn):
        cur = conn.execute("UPDATE users SET password_hash=? WHERE id=? AND password_hash=?",
                           (new, user_id, old))
        return Done(cur.rowcount == 1)


@command
def ensure_default_users(conn: sqlite3.Connection, admin_password: str | None) -> Effects:
    """`admin` and `determined` exist; `admin_password` (plain text) is applied when given, to
    `admin` and to a passwordless `determined`, each with a salt of its own."""
    forms = None
    if admin_password:  # hashed before the transaction: scrypt takes ~0.1 s each
        hashed = client_hash(admin_password)
        forms = hash_password(hashed), hash_password(hashed)
    with transaction(conn):  # one commit: no start-up leaves the users without their password
        for name, admin in (("admin", 1), ("determined", 0)):
            conn.execute("INSERT INTO users (username, admin) VALUES (?, ?) "
                         "ON CONFLICT DO NOTHING", (name, admin))
        if forms is not None:
            conn.execute("UPDATE users SET password_hash=? WHERE username='admin'", (forms[0],))
            # `determined` must not stay an open door once the master is reachable.
            conn.execute("UPDATE users SET password_hash=? WHERE username='determined' "
                         "AND password_hash=''", (forms[1],))
    return NONE


def by_name(conn: sqlite3.Connection, username: str) -> User | None:
    row = conn.execute(f"{FROM_USERS} WHERE username=?", (username,)).fetchone()
    return User.from_row(row) if row else None


def by_id(conn: sqlite3.Connection, user_id: int) -> User:
    row = conn.execute(f"{FROM_USERS} WHERE id=?", (user_id,)).fetchone()
    if row is None:
        raise NotFound(f"user {user_id} not found")
    return User.from_row(row)


def has_password(conn: sqlite3.Connection, username: str) -> bool:
    user = by_name(conn, username)
    return bool(user and user.password_hash)


@command
def set_password(conn: sqlite3.Connection, username: str, stored: str) -> Effects:
    """Set a user's password: `stored` is `hash_password`'s form."""
    with transaction(conn):
        cur = conn.execute(
            "UPDATE users SET password_hash=? WHERE username=?", (stored, username)
        )
        if cur.rowcount == 0:
            raise NotFound(f"user '{username}' not found")
    return NONE


def token_hash(token: str) -> str:
    """How a secret is kept in the store: its SHA-256 (a stolen database gives no logins)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@command
def new_session(conn: sqlite3.Connection, user_id: int, lifetime: float = SESSION_LIFETIME,
                now: float | None = None) -> Done[str]:
    """A login session of `lifetime` seconds; the token (only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    with transaction(conn):
        conn.execute(
            "INSERT INTO user_sessions (token_hash, user_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)", (token_hash(token), user_id, now, now + lifetime))
    return Done(token)


@step
def add_task_session(conn: sqlite3.Connection, user_id: int, alloc_id: str, token: str,
                     now: float | None = None) -> None:
    """Inside the transaction that creates an allocation: its owner's session, the trial's
    DET_USER_TOKEN (for the CLI and SDK inside it, as in Determined). It ends with the
    allocation (`end_task_sessions`)."""
    now = time.time() if now is None else now
    conn.execute("INSERT INTO user_sessions (token_hash, user_id, created_at, expires_at, "
                 "allocation_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 (token_hash(token), user_id, now, now + SESSION_LIFETIME, alloc_id))


@step
def end_task_sessions(conn: sqlite3.Connection, alloc_id: str) -> None:
    """Inside the transaction that ends an allocation: its DET_USER_TOKEN stops working."""
    conn.execute("DELETE FROM user_sessions WHERE allocation_id=?", (alloc_id,))


@command
def drop_session(conn: sqlite3.Connection, token: str) -> Effects:
    """A logout: that session ends (and every expired one with it)."""
    with transaction(conn):
        conn.execute("DELETE FROM user_sessions WHERE token_hash=? OR expires_at <= ?",
                     (token_hash(token), time.time()))
    return NONE


@command
def create(conn: sqlite3.Connection, username: str, stored: str, *, admin: bool,
           active: bool = True, display_name: str | None = None) -> Done[User]:
    """A new user; `stored` is `hash_password`'s form of its password ('': no password)."""
    with transaction(conn):
        if by_name(conn, username) is not None:
            raise Conflict(f"user '{username}' already exists")
        row = conn.execute(
            "INSERT INTO users (username, password_hash, admin, active, display_name) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (username, stored, int(admin), int(active), display_name)).fetchone()
        return Done(by_id(conn, int(row[0])))


@command
def update(conn: sqlite3.Connection, user_id: int, *, active: bool | None = None,
           admin: bool | None = None, display_name: str | None = None,
           password_hash: str | None = None, agent: AgentLink | None = None,
           unlink_agent: bool = False) -> Done[User]:
    """Change a user; deactivating one ends its sessions in the same commit. `password_hash`
    is `hash_password`'s form; `agent` links its agent user, `unlink_agent` unlinks it."""
    with transaction(conn):
        user = by_id(conn, user_id)
        if active is not None:
            conn.execute("UPDATE users SET active=? WHERE id=?", (int(active), user.id))
            if not active:
                conn.execute("DELETE FROM user_sessions WHERE user_id=?", (user.id,))
        if admin is not None:
            conn.execute("UPDATE users SET admin=? WHERE id=?", (int(admin), user.id))
        if display_name is not None:
            conn.execute("UPDATE users SET display_name=? WHERE id=?", (display_name, user.id))
        if password_hash is not None:
            conn.execute("UPDATE users SET password_hash=? WHERE id=?", (password_hash, user.id))
        if agent is not None or unlink_agent:
            _link(conn, user.id, agent)
        return Done(by_id(conn, user.id))


def _link(conn: sqlite3.Connection, user_id: int, agent: AgentLink | None) -> None:
    values = (agent.uid, agent.gid, agent.user, agent.group) if agent else (None,) * 4
    conn.execute("UPDATE users SET agent_uid=?, agent_gid=?, agent_user=?, agent_group=? "
                 "WHERE id=?", (*values, user_id))


def list_(conn: sqlite3.Connection, active: bool | None = None) -> list[User]:
    sql, args = f"{FROM_USERS}", ()
    if active is not None:
        sql, args = sql + " WHERE active=?", (int(active),)
    return [User.from_row(r) for r in conn.execute(sql + " ORDER BY id", args)]
