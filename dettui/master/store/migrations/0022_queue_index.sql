-- The job queue's order (priority, queue position, id) as an index that also holds what filters
-- it (state, managed, pool): a page of the queue is an index walk of offset + limit entries and
-- its total an index count, not a sort of every live experiment.
CREATE INDEX experiments_queue ON experiments(priority, queue_position, id, state, unmanaged,
                                              resource_pool);
