-- The job queue's index holds every column a job shows (as SQLite's does): a page of the
-- queue can be an index-only scan.
DROP INDEX experiments_queue;
CREATE INDEX experiments_queue ON experiments(priority, queue_position, id, state, unmanaged,
                                              resource_pool)
    INCLUDE (name, owner_id, job_id, weight, max_slots, start_time, progress, slots_per_trial);
