-- The job queue's index holds every column a job shows, after its order (priority, queue
-- position, id) and what filters it (state, managed, pool): a page of the queue is read from
-- the index alone. An experiment's row holds its config and searcher state (10 KB), which
-- spill to overflow pages, and reading a column stored after them goes through those pages.
DROP INDEX experiments_queue;
CREATE INDEX experiments_queue ON experiments(priority, queue_position, id, state, unmanaged,
                                              resource_pool, name, owner_id, job_id, weight,
                                              max_slots, start_time, progress,
                                              slots_per_trial);
