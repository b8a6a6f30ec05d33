-- Deferred routing stages (the llm stage by default): a live delivery the stages before a
-- deferred one left undecided is stored 'pending' and queued here, in the transaction that
-- stores the event; the triage worker of every `serve` claims rows with FOR UPDATE SKIP
-- LOCKED and a lease, and deletes the row in the transaction that writes the decision.

-- The whole list, so whichever of this and the held events' migration runs last is right.
ALTER TABLE events DROP CONSTRAINT events_disposition,
    ADD CONSTRAINT events_disposition
        CHECK (disposition IN ('routed', 'dropped', 'repeat', 'held', 'pending'));

CREATE TABLE pending_events (
    event_id     uuid PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    -- The deferred stage that decides it (trace.pending).
    stage        text NOT NULL,
    -- The owner endpoint when it was stored: claims take the oldest of each endpoint in
    -- turn, so one endpoint's backlog never starves another's (no foreign key: a deleted
    -- endpoint's events are still decided, by its webhook's fate).
    endpoint_id  uuid,
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Claims taken so far (a claim whose lease ran out, its worker gone, counts).
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Free to claim when lease_until has passed ('-infinity': never claimed or given back).
    lease_until  timestamptz NOT NULL DEFAULT '-infinity',
    lease_owner  text
);
CREATE INDEX idx_pending_events_claim ON pending_events (stage, endpoint_id, received_at);
