-- Every save of a webhook's routing config, numbered from 1 per webhook: the whole config,
-- its content hash, who saved it (an endpoint's id or 'operator'), when, and a note.
CREATE TABLE routing_versions (
    webhook_id   uuid NOT NULL REFERENCES endpoint_webhooks (id) ON DELETE CASCADE,
    version      integer NOT NULL CHECK (version >= 1),
    config       jsonb NOT NULL,
    config_hash  text NOT NULL,
    author       text NOT NULL,
    note         text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (webhook_id, version)
);

-- The diffs run over stored deliveries, per candidate: what [routing] require_diff checks.
CREATE TABLE routing_diffs (
    webhook_id      uuid NOT NULL REFERENCES endpoint_webhooks (id) ON DELETE CASCADE,
    candidate_hash  text NOT NULL,
    evaluated       integer NOT NULL,
    diffed_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (webhook_id, candidate_hash)
);
