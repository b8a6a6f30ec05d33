-- Model calls in flight per provider, across every serve on this database: slot 1..cap of
-- a provider is a row while a call holds it (token: that call's), deleted when the call
-- ends; a killed worker's slot is free again at ``until`` (taken over by the next call).
CREATE TABLE llm_in_flight (
    provider  text NOT NULL,
    slot      integer NOT NULL CHECK (slot > 0),
    token     uuid NOT NULL,
    holder    text NOT NULL,
    until     timestamptz NOT NULL,
    PRIMARY KEY (provider, slot)
);
