-- Held deliveries (on_fault = "hold") are few and wanted together: the metrics scrape
-- counts them (switchboard_held_events) and release_held_events pages through them
-- newest first, however many other deliveries came since.
CREATE INDEX idx_events_held ON events (webhook_id, received_at DESC, id DESC)
    WHERE disposition = 'held';
