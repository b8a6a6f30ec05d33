-- Token reservations: a call holds an estimate of its tokens (`reserved`) from the moment
-- its prompt is reserved until its real usage is known, so calls running at once see each
-- other's cost and cannot pass a token budget together. `settled` counts the calls whose
-- real usage is in `tokens` (their average is the next call's estimate).
ALTER TABLE llm_triage_budget
    ADD COLUMN reserved bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    ADD COLUMN settled integer NOT NULL DEFAULT 0 CHECK (settled >= 0);
