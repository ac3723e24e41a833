-- dettui master store, version 1.
CREATE TABLE users (
    id INTEGER PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL DEFAULT '',
    admin INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    display_name TEXT
);

CREATE TABLE user_sessions (
    token TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id),
    created_at REAL NOT NULL
);

CREATE TABLE experiments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    description TEXT,
    labels TEXT NOT NULL DEFAULT '[]',
    state TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    owner_id INTEGER NOT NULL REFERENCES users(id),
    config TEXT NOT NULL,            -- fully defaulted config, JSON
    original_config TEXT NOT NULL,   -- the YAML text the user sent
    searcher_type TEXT NOT NULL,
    job_id TEXT NOT NULL UNIQUE,
    resource_pool TEXT NOT NULL,
    priority INTEGER NOT NULL,
    weight REAL NOT NULL DEFAULT 1,
    max_slots INTEGER,
    queue_position REAL NOT NULL,
    start_time REAL NOT NULL,
    end_time REAL,
    progress REAL,
    unmanaged INTEGER NOT NULL DEFAULT 0,
    context BLOB                      -- tar.gz of the model definition
);

CREATE TABLE trials (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    request_id TEXT NOT NULL,
    task_id TEXT NOT NULL UNIQUE,
    hparams TEXT NOT NULL,
    seed INTEGER NOT NULL,
    state TEXT NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0,
    run_id INTEGER NOT NULL DEFAULT 0,
    total_batches INTEGER NOT NULL DEFAULT 0,
    start_time REAL NOT NULL,
    end_time REAL,
    progress REAL,
    runner_state TEXT NOT NULL DEFAULT '',
    searcher_stopped INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX trials_experiment ON trials(experiment_id);

CREATE TABLE allocations (
    id TEXT PRIMARY KEY,             -- "<taskId>.<runId>"
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    run_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    token TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    slots TEXT NOT NULL,             -- JSON list of slot ids on that agent
    start_time REAL NOT NULL,
    end_time REAL,
    exit_code INTEGER,
    exit_reason TEXT,
    preempt_requested INTEGER NOT NULL DEFAULT 0,
    preempt_acked INTEGER NOT NULL DEFAULT 0,
    kill_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX allocations_trial ON allocations(trial_id);
CREATE INDEX allocations_live ON allocations(state) WHERE state != 'EXITED';

CREATE TABLE metrics (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    run_id INTEGER NOT NULL,
    grp TEXT NOT NULL,
    steps_completed INTEGER NOT NULL,
    report_time REAL NOT NULL,
    metrics TEXT NOT NULL,           -- avgMetrics, JSON
    batch_metrics TEXT,
    archived INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX metrics_trial ON metrics(trial_id, grp, steps_completed);

CREATE TABLE logs (
    id INTEGER PRIMARY KEY,
    trial_id INTEGER,
    task_id TEXT NOT NULL,
    allocation_id TEXT,
    agent_id TEXT,
    container_id TEXT,
    rank_id INTEGER,
    stdtype TEXT,
    source TEXT NOT NULL DEFAULT 'task',
    level TEXT,
    timestamp REAL NOT NULL,
    log TEXT NOT NULL
);
CREATE INDEX logs_trial ON logs(trial_id, id);

CREATE TABLE checkpoints (
    uuid TEXT PRIMARY KEY,
    trial_id INTEGER,
    experiment_id INTEGER,
    task_id TEXT NOT NULL,
    allocation_id TEXT,
    report_time REAL NOT NULL,
    state TEXT NOT NULL,
    resources TEXT NOT NULL,
    metadata TEXT NOT NULL,
    steps_completed INTEGER,
    storage_id INTEGER
);
CREATE INDEX checkpoints_trial ON checkpoints(trial_id);

CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    pool TEXT NOT NULL,
    slots TEXT NOT NULL,             -- JSON list of slot descriptions
    hostname TEXT NOT NULL DEFAULT '',
    addresses TEXT NOT NULL DEFAULT '[]',
    registered_time REAL NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE cluster (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
