"""Users and their login sessions."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import time

from dettui.errors import Conflict, NotFound
from dettui.master.store.records import User, columns
from dettui.master.store.tx import transaction

FROM_USERS = f"SELECT {columns(User.COLUMNS)} FROM users"

# Determined's client-side salt (authentication.salt_and_hash).
CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"
SESSION_LIFETIME = 7 * 24 * 3600.0  # seconds a login lasts, as in Determined


def client_hash(password: str) -> str:
    """What Determined's client sends for `password` (empty stays empty)."""
    if password == "":
        return ""
    return hashlib.sha512((CLIENT_SALT + password).encode()).hexdigest()


def _stored_form(hashed: str) -> str:
    if hashed == "":
        return ""
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", hashed.encode(), salt, 20_000)
    return f"pbkdf2${salt.hex()}${digest.hex()}"


def password_matches(user: User, hashed: str) -> bool:
    if user.password_hash == "":
        return hashed == ""
    if hashed == "":
        return False
    _, salt, digest = user.password_hash.split("$")
    mine = hashlib.pbkdf2_hmac("sha256", hashed.encode(), bytes.fromhex(salt), 20_000)
    return hmac.compare_digest(mine.hex(), digest)


def ensure_default_users(conn: sqlite3.Connection, admin_password: str | None) -> None:
    """`admin` and `determined` exist; `admin_password` (plain text) is applied when given."""
    with transaction(conn):
        for name, admin in (("admin", 1), ("determined", 0)):
            conn.execute("INSERT INTO users (username, admin) VALUES (?, ?) "
                         "ON CONFLICT DO NOTHING", (name, admin))
        if admin_password:
            stored = _stored_form(client_hash(admin_password))
            conn.execute("UPDATE users SET password_hash=? WHERE username='admin'", (stored,))
            # `determined` must not stay an open door once the master is reachable.
            conn.execute("UPDATE users SET password_hash=? WHERE username='determined' "
                         "AND password_hash=''", (stored,))


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


def set_password(conn: sqlite3.Connection, username: str, hashed: str) -> None:
    with transaction(conn):
        cur = conn.execute(
            "UPDATE users SET password_hash=? WHERE username=?", (_stored_form(hashed), username)
        )
        if cur.rowcount == 0:
            raise NotFound(f"user '{username}' not found")


def token_hash(token: str) -> str:
    """How a secret is kept in the store: its SHA-256 (a stolen database gives no logins)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_session(conn: sqlite3.Connection, user_id: int, lifetime: float = SESSION_LIFETIME,
                now: float | None = None) -> str:
    """A login session of `lifetime` seconds; the token (only its hash is stored)."""
    token = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    with transaction(conn):
        conn.execute(
            "INSERT INTO user_sessions (token_hash, user_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?)", (token_hash(token), user_id, now, now + lifetime))
    return token


def add_task_session(conn: sqlite3.Connection, user_id: int, alloc_id: str, token: str,
                     now: float | None = None) -> None:
    """Inside the transaction that creates an allocation: its owner's session, the trial's
    DET_USER_TOKEN (for the CLI and SDK inside it, as in Determined). It ends with the
    allocation (`end_task_sessions`)."""
    now = time.time() if now is None else now
    conn.execute("INSERT INTO user_sessions (token_hash, user_id, created_at, expires_at, "
                 "allocation_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 (token_hash(token), user_id, now, now + SESSION_LIFETIME, alloc_id))


def end_task_sessions(conn: sqlite3.Connection, alloc_id: str) -> None:
    """Inside the transaction that ends an allocation: its DET_USER_TOKEN stops working."""
    conn.execute("DELETE FROM user_sessions WHERE allocation_id=?", (alloc_id,))


def drop_session(conn: sqlite3.Connection, token: str) -> None:
    with transaction(conn):
        conn.execute("DELETE FROM user_sessions WHERE token_hash=? OR expires_at <= ?",
                     (token_hash(token), time.time()))


def create(conn: sqlite3.Connection, username: str, hashed: str, *, admin: bool,
           active: bool = True, display_name: str | None = None) -> User:
    """A new user; `hashed` is the client-side hash of the password (empty: no password)."""
    with transaction(conn):
        if by_name(conn, username) is not None:
            raise Conflict(f"user '{username}' already exists")
        row = conn.execute(
            "INSERT INTO users (username, password_hash, admin, active, display_name) "
            "VALUES (?, ?, ?, ?, ?) RETURNING id",
            (username, _stored_form(hashed), int(admin), int(active), display_name)).fetchone()
        return by_id(conn, int(row[0]))


def update(conn: sqlite3.Connection, user_id: int, *, active: bool | None = None,
           admin: bool | None = None, display_name: str | None = None,
           hashed_password: str | None = None) -> User:
    """Change a user; deactivating one ends its sessions in the same commit."""
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
        if hashed_password is not None:
            conn.execute("UPDATE users SET password_hash=? WHERE id=?",
                         (_stored_form(hashed_password), user.id))
        return by_id(conn, user.id)


def list_(conn: sqlite3.Connection, active: bool | None = None) -> list[User]:
    sql, args = f"{FROM_USERS}", ()
    if active is not None:
        sql, args = sql + " WHERE active=?", (int(active),)
    return [User.from_row(r) for r in conn.execute(sql + " ORDER BY id", args)]
