-- What an ingest token resolves to (its webhook, the endpoints and routes behind its
-- targets, the friendships that authorize them, the owner's other endpoints' queues) is
-- read by every delivery. A worker keeps a resolution while this counter stays where it
-- was read: every change to those tables moves it in the changing transaction, so the new
-- counter becomes visible together with the change. Each delivery's write checks the
-- counter in its own statement; a moved one sends the delivery back to resolve afresh
-- (store/rescache.py, store/groupwrite.py).
CREATE TABLE resolve_epoch (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    n bigint NOT NULL
);
INSERT INTO resolve_epoch (one, n) VALUES (true, 0);

CREATE FUNCTION bump_resolve_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE resolve_epoch SET n = n + 1;
    RETURN NULL;
END
$$;

-- Deferred to the commit: the counter's row lock is the changing transaction's last, so
-- two changes never wait on each other's locks through it (no deadlock), and each one
-- moves the counter once per changed row at most.
CREATE CONSTRAINT TRIGGER resolve_epoch_webhooks
    AFTER UPDATE OR DELETE ON endpoint_webhooks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_resolve_epoch();
CREATE CONSTRAINT TRIGGER resolve_epoch_endpoints
    AFTER INSERT OR UPDATE OR DELETE ON endpoints
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_resolve_epoch();
CREATE CONSTRAINT TRIGGER resolve_epoch_routes
    AFTER INSERT OR UPDATE OR DELETE ON webhook_routes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_resolve_epoch();
CREATE CONSTRAINT TRIGGER resolve_epoch_friendships
    AFTER INSERT OR UPDATE OR DELETE ON friendships
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_resolve_epoch();

-- TRUNCATE has no row triggers: one per statement.
CREATE TRIGGER resolve_epoch_webhooks_truncate AFTER TRUNCATE ON endpoint_webhooks
    FOR EACH STATEMENT EXECUTE FUNCTION bump_resolve_epoch();
CREATE TRIGGER resolve_epoch_endpoints_truncate AFTER TRUNCATE ON endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION bump_resolve_epoch();
CREATE TRIGGER resolve_epoch_routes_truncate AFTER TRUNCATE ON webhook_routes
    FOR EACH STATEMENT EXECUTE FUNCTION bump_resolve_epoch();
CREATE TRIGGER resolve_epoch_friendships_truncate AFTER TRUNCATE ON friendships
    FOR EACH STATEMENT EXECUTE FUNCTION bump_resolve_epoch();
