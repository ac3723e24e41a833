"""Users and their login sessions."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import time

from dettui.errors import NotFound
from dettui.master.store.records import User
from dettui.master.store.tx import transaction

# Determined's client-side salt (authentication.salt_and_hash).
CLIENT_SALT = "GubPEmmotfiK9TMD6Zdw"


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
            conn.execute(
                "INSERT OR IGNORE INTO users (username, admin) VALUES (?, ?)", (name, admin)
            )
        if admin_password:
            stored = _stored_form(client_hash(admin_password))
            conn.execute("UPDATE users SET password_hash=? WHERE username='admin'", (stored,))
            # `determined` must not stay an open door once the master is reachable.
            conn.execute("UPDATE users SET password_hash=? WHERE username='determined' "
                         "AND password_hash=''", (stored,))


def by_name(conn: sqlite3.Connection, username: str) -> User | None:
    row = conn.execute("SELECT * FROM users WHERE username=?", (username,)).fetchone()
    return User.from_row(row) if row else None


def by_id(conn: sqlite3.Connection, user_id: int) -> User:
    row = conn.execute("SELECT * FROM users WHERE id=?", (user_id,)).fetchone()
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


def new_session(conn: sqlite3.Connection, user_id: int) -> str:
    token = secrets.token_urlsafe(32)
    with transaction(conn):
        conn.execute(
            "INSERT INTO user_sessions (token, user_id, created_at) VALUES (?, ?, ?)",
            (token, user_id, time.time()),
        )
    return token


def user_for_token(conn: sqlite3.Connection, token: str) -> User | None:
    row = conn.execute(
        "SELECT users.* FROM user_sessions JOIN users ON users.id = user_sessions.user_id "
        "WHERE token=?",
        (token,),
    ).fetchone()
    return User.from_row(row) if row else None


def drop_session(conn: sqlite3.Connection, token: str) -> None:
    with transaction(conn):
        conn.execute("DELETE FROM user_sessions WHERE token=?", (token,))


def list_(conn: sqlite3.Connection, active: bool | None = None) -> list[User]:
    sql, args = "SELECT * FROM users", ()
    if active is not None:
        sql, args = sql + " WHERE active=?", (int(active),)
    return [User.from_row(r) for r in conn.execute(sql + " ORDER BY id", args)]
