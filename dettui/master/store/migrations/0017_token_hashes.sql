-- Allocation tokens are kept by their SHA-256 (the master derives the tokens from its key file:
-- dettui/master/tokens.py), and a trial's DET_USER_TOKEN session names its allocation so that
-- it ends with it. Sessions of allocations that already ended are dropped.
UPDATE allocations SET token = sha256_hex(token);
ALTER TABLE user_sessions ADD COLUMN allocation_id TEXT;
CREATE INDEX user_sessions_allocation ON user_sessions(allocation_id)
    WHERE allocation_id IS NOT NULL;
