-- Work: one todo per (endpoint, idempotency key) while it is live.
CREATE TABLE todos (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id      uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    queue            text NOT NULL,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'claimed', 'done', 'dead')),
    idempotency_key  text NOT NULL,
    title            text NOT NULL DEFAULT '',
    payload          jsonb NOT NULL DEFAULT '{}',
    event_id         uuid REFERENCES events (id) ON DELETE SET NULL,
    owner            text,
    lease_expires_at timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at     timestamptz
);
CREATE UNIQUE INDEX uq_todos_live_key ON todos (endpoint_id, idempotency_key)
    WHERE state IN ('pending', 'claimed');
CREATE INDEX idx_todos_claimable ON todos (endpoint_id, queue, available_at, created_at)
    WHERE state = 'pending';
CREATE INDEX idx_todos_event ON todos (event_id);
