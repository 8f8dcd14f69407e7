-- Run by the migrator under its advisory lock before looking at what is applied: the schema
-- and the bookkeeping table, created once.
CREATE SCHEMA IF NOT EXISTS drover;
CREATE TABLE IF NOT EXISTS drover.schema_migrations (
    version     bigint      PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    checksum    text        NOT NULL
);
