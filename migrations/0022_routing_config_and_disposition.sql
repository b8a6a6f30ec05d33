-- One spelling for a webhook's routing config, from the database to the API:
-- {"rules": [...], "default_action": {...} | null, "params": {...}} in one column.
ALTER TABLE endpoint_webhooks
    ADD COLUMN routing jsonb NOT NULL DEFAULT '{"rules": [], "default_action": null, "params": {}}';
UPDATE endpoint_webhooks SET routing = jsonb_build_object(
    'rules', coalesce(routing_rules, '[]'::jsonb),
    'default_action', coalesce(default_action, 'null'::jsonb),
    'params', coalesce(routing_params, '{}'::jsonb));
ALTER TABLE endpoint_webhooks
    DROP COLUMN routing_rules, DROP COLUMN default_action, DROP COLUMN routing_params;

-- What became of each delivery, stored when it is recorded (never re-derived from the
-- trace): 'routed' or 'dropped' today; the lanes stage adds 'repeat' and 'held'.
ALTER TABLE events ADD COLUMN disposition text;
UPDATE events SET disposition = CASE
    WHEN (routing_trace -> 'action' ->> 'drop') = 'true' THEN 'dropped' ELSE 'routed' END;
ALTER TABLE events ALTER COLUMN disposition SET NOT NULL,
    ADD CONSTRAINT events_disposition CHECK (disposition IN ('routed', 'dropped', 'repeat', 'held'));
CREATE INDEX idx_events_webhook_disposition ON events (webhook_id, disposition, received_at DESC);
