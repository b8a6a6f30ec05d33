-- Producer-specific sources configured per webhook (the declarative hmac source), and
-- rotation overlap: after a rotation the previous ingest token and signing secret keep
-- working until previous_until, so deliveries already in flight at the producer land.
ALTER TABLE endpoint_webhooks
    ADD COLUMN source_config jsonb,
    ADD COLUMN previous_token_hash text,
    ADD COLUMN previous_secret_enc bytea,
    ADD COLUMN previous_until timestamptz;
CREATE INDEX endpoint_webhooks_previous_token_hash_idx
    ON endpoint_webhooks (previous_token_hash) WHERE previous_token_hash IS NOT NULL;
