-- A deleted webhook leaves a tombstone, so its owner can still list and read its events
-- (they stay, as `webhook delete` says), and events keep the id of the webhook they came in
-- on: the foreign key that nulled it on delete goes (the id is history, not a live link).
CREATE TABLE deleted_webhooks (
    id           uuid PRIMARY KEY,
    endpoint_id  uuid NOT NULL,
    owner_human  uuid NOT NULL,
    source_type  text NOT NULL,
    target_queue text NOT NULL,
    created_at   timestamptz NOT NULL,
    deleted_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_deleted_webhooks_owner ON deleted_webhooks (owner_human);

DO $$
DECLARE
    fk text;
BEGIN
    FOR fk IN
        SELECT c.conname
        FROM pg_constraint c
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
        WHERE c.conrelid = 'events'::regclass AND c.contype = 'f' AND a.attname = 'webhook_id'
    LOOP
        EXECUTE format('ALTER TABLE events DROP CONSTRAINT %I', fk);
    END LOOP;
END
$$;
