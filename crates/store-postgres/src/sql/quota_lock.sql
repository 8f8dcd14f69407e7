-- Serialize quota checks: transaction-scoped advisory locks, taken in the order given (the
-- caller sorts the keys, so concurrent enqueuers never deadlock). Released at commit/rollback.
--
-- $1 keys bigint[].
SELECT pg_advisory_xact_lock(k) FROM unnest($1::bigint[]) AS k
