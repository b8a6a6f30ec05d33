-- Ingest tokens are credentials: keep only their SHA-256 (hex, as endpoint tokens), look
-- deliveries up by it, and show the token once at create/rotate.
ALTER TABLE endpoint_webhooks ADD COLUMN ingest_token_hash text;
UPDATE endpoint_webhooks
   SET ingest_token_hash = encode(sha256(convert_to(ingest_token, 'UTF8')), 'hex');
ALTER TABLE endpoint_webhooks ALTER COLUMN ingest_token_hash SET NOT NULL;
ALTER TABLE endpoint_webhooks
    ADD CONSTRAINT endpoint_webhooks_ingest_token_hash_key UNIQUE (ingest_token_hash);
ALTER TABLE endpoint_webhooks DROP COLUMN ingest_token;
