-- Every verified delivery, once: (source, external_id) is the dedup slot.
CREATE TABLE events (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    source         text NOT NULL,
    kind           text,
    external_id    text NOT NULL,
    headers        jsonb NOT NULL DEFAULT '{}',
    body           bytea NOT NULL,
    content_type   text,
    size           integer NOT NULL,
    verified       boolean NOT NULL,
    trust_mode     text NOT NULL,
    verify_detail  text,
    received_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT events_dedup UNIQUE (source, external_id)
);
