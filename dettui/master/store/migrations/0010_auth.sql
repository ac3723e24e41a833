-- Sessions are kept by the SHA-256 of their token, with an expiry (sessions of older versions,
-- stored in plain text, are dropped: their users log in again).
DROP TABLE user_sessions;
CREATE TABLE user_sessions (
    token_hash TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX user_sessions_user ON user_sessions(user_id);
-- Agents authenticate with credentials of their own, issued by an admin, bound to the agent id
-- that first registers with them; kept by the SHA-256 of the secret.
CREATE TABLE agent_credentials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    agent_id TEXT,
    created_by INTEGER REFERENCES users(id),
    created_at REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
