-- Self-managed webhooks: an ingest URL owned by an endpoint, delivering to its queue.
CREATE TABLE endpoint_webhooks (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id         uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    source_type         text NOT NULL,
    target_queue        text NOT NULL,
    trust_mode          text NOT NULL CHECK (trust_mode IN ('signed', 'token')),
    ingest_token        text NOT NULL UNIQUE,
    signing_secret_enc  bytea,
    created_at          timestamptz NOT NULL DEFAULT now(),
    rotated_at          timestamptz
);
CREATE INDEX idx_endpoint_webhooks_endpoint ON endpoint_webhooks (endpoint_id);

-- Extra delivery targets (ADR-0022): same human, or a human with an approved friendship.
CREATE TABLE webhook_routes (
    webhook_id          uuid NOT NULL REFERENCES endpoint_webhooks (id) ON DELETE CASCADE,
    target_endpoint_id  uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    granted_by          uuid REFERENCES endpoints (id) ON DELETE SET NULL,
    granted_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (webhook_id, target_endpoint_id)
);
