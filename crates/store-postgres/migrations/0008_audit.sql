-- Drover schema, version 8: the audit log of operator actions (docs/audit.md).
--
-- One row per operator write, inserted in the transaction of the write itself (audit.rs), so
-- a write and its record commit or roll back together. `id` orders the rows (the keyset of
-- `GET /v1/audit`); `at` is the database clock of the write. The table is new and small, so
-- its indexes are built in the same locking step as the table.

-- drover:step locking
CREATE TABLE IF NOT EXISTS drover.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    tenant text,
    action text NOT NULL,
    target jsonb NOT NULL,
    jobs bigint NOT NULL DEFAULT 0,
    source text NOT NULL,
    CONSTRAINT audit_log_source_check
        CHECK (source IN ('dashboard', 'api', 'cli', 'library'))
);
-- Retention deletes the oldest rows first.
CREATE INDEX IF NOT EXISTS audit_log_at_idx ON drover.audit_log (at);
-- A tenant's page, newest first.
CREATE INDEX IF NOT EXISTS audit_log_tenant_idx ON drover.audit_log (tenant, id);
