-- Each claim of a todo gets an id of its own, which complete, fail and heartbeat may present:
-- workers sharing one endpoint's token hold their claims by endpoint, so a worker whose
-- lease ran out could otherwise complete (or fail, or extend) the claim another worker took
-- of the same todo since. Set by every claim; NULL before a todo's first claim.
ALTER TABLE todos ADD COLUMN claim_id uuid;
