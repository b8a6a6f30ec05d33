-- ADR-0024: per-webhook ordered rules, an optional default, and a trace on every row.
ALTER TABLE endpoint_webhooks
    ADD COLUMN routing_rules jsonb NOT NULL DEFAULT '[]',
    ADD COLUMN default_action jsonb;

ALTER TABLE events
    ADD COLUMN webhook_id uuid REFERENCES endpoint_webhooks ON DELETE SET NULL,
    ADD COLUMN routing_trace jsonb;

ALTER TABLE todos
    ADD COLUMN routing_trace jsonb;

CREATE INDEX idx_events_webhook ON events (webhook_id, received_at DESC);
