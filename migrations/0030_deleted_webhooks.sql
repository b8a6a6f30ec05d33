-- A deleted webhook leaves a tombstone, so its owner can still list and read its events
-- (they stay, as `webhook delete` says). The foreign key still nulls events.webhook_id on
-- delete (a delivery racing the delete must still fail on it), so the id it held is kept
-- beside it, in deleted_webhook_id, by a trigger on that very update.
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

ALTER TABLE events ADD COLUMN deleted_webhook_id uuid;
CREATE INDEX idx_events_deleted_webhook ON events (deleted_webhook_id, received_at DESC)
    WHERE deleted_webhook_id IS NOT NULL;

CREATE FUNCTION events_keep_deleted_webhook() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.webhook_id IS NULL AND OLD.webhook_id IS NOT NULL THEN
        NEW.deleted_webhook_id := OLD.webhook_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER events_keep_deleted_webhook BEFORE UPDATE OF webhook_id ON events
    FOR EACH ROW EXECUTE FUNCTION events_keep_deleted_webhook();
