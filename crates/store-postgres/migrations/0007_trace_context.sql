-- Drover schema, version 7: the W3C trace context a job carries from its enqueue to every
-- attempt (docs/opentelemetry.md; ADR 0013). One nullable column:
--   trace_context   {"traceparent": "...", "tracestate": "..."} as captured at enqueue, NULL
--                   for jobs enqueued without a trace; no transition writes it, so it is kept
--                   across retries and operator retries.
--
-- A column without a default changes the catalog only: no table rewrite, an ACCESS EXCLUSIVE
-- lock held for an instant.

-- drover:step locking
ALTER TABLE drover.jobs ADD COLUMN IF NOT EXISTS trace_context jsonb;
