-- ADR-0025: rule params, work orders on todos, and at-most-once claims per subject.
ALTER TABLE endpoint_webhooks
    ADD COLUMN routing_params jsonb NOT NULL DEFAULT '{}';

ALTER TABLE todos
    ADD COLUMN work_order jsonb;

-- event_id is deliberately not a foreign key: event retention must not release a claim.
CREATE TABLE routing_once (
    webhook_id  uuid NOT NULL,
    once_key    text NOT NULL,
    event_id    uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (webhook_id, once_key)
);
