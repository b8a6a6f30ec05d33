-- Refused deliveries, per webhook, so an owner can see why a producer is turned away.
-- Bounded by design: a webhook keeps at most its last N refusals (a ring of N slots,
-- overwritten in turn: [ingest] refusals_kept), and beyond that only the count, so a
-- flood of forged deliveries cannot fill the disk. Never the body; at most 1 KiB of
-- sanitized headers.
CREATE TABLE webhook_refusal_counts (
    webhook_id   uuid PRIMARY KEY REFERENCES endpoint_webhooks (id) ON DELETE CASCADE,
    total        bigint NOT NULL DEFAULT 0,
    last_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_refusals (
    webhook_id   uuid NOT NULL REFERENCES endpoint_webhooks (id) ON DELETE CASCADE,
    slot         integer NOT NULL CHECK (slot >= 0),
    seq          bigint NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    reason       text NOT NULL,
    detail       text,
    delivery_id  text,
    source_ip    text,
    size         integer NOT NULL,
    headers      jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (webhook_id, slot)
);

-- Newest first, per webhook, and the lookup `switchboard send` makes by delivery id.
CREATE INDEX idx_webhook_refusals_seq ON webhook_refusals (webhook_id, seq DESC);
CREATE INDEX idx_webhook_refusals_delivery ON webhook_refusals (webhook_id, delivery_id);
