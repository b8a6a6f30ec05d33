-- The delivery's header block as received (names as sent, secret values redacted, every
-- other byte exact): headers the jsonb column cannot hold (NUL, non-UTF-8) survive here.
ALTER TABLE events ADD COLUMN raw_headers bytea;
