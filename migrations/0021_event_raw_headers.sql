-- The delivery's header block in arrival order (names lower-cased, secret values redacted, every
-- other byte exact): headers the jsonb column cannot hold (NUL, non-UTF-8) survive here.
ALTER TABLE events ADD COLUMN raw_headers bytea;
