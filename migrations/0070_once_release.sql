-- Once claims that end: a lane's TTL (routing config lanes.<queue>.once_ttl_s) sets
-- expires_at when the claim is taken (NULL: until released), and release_once_claim
-- deletes a claim, each release recorded with who made it.
ALTER TABLE routing_once ADD COLUMN expires_at timestamptz;

CREATE TABLE routing_once_releases (
    id           bigserial PRIMARY KEY,
    webhook_id   uuid NOT NULL,
    once_key     text NOT NULL,
    queue        text NOT NULL,
    subject      text NOT NULL,
    event_id     uuid,
    released_by  text NOT NULL,
    released_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX routing_once_releases_webhook ON routing_once_releases (webhook_id, released_at);
