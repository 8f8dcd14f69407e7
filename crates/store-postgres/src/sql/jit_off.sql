-- No JIT compilation for the rest of the transaction. The planner's estimates of a bounded
-- statement with laterals over a recursive scan (queue_snapshot.sql) run into the millions,
-- past jit_above_cost, and compiling it takes far longer than running it (ADR 0015).
SET LOCAL jit = off
