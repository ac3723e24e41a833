-- The parts of an allocation marked as daemons (Determined's MarkAllocationResourcesDaemon:
-- the sshd of a non-chief DeepSpeed or Horovod node): a JSON list of agent ids. Once every
-- other part has exited they are ended, and how they end does not count.
ALTER TABLE allocations ADD COLUMN daemons TEXT NOT NULL DEFAULT '[]';
