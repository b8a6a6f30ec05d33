-- LLM triage (the `llm` routing stage): each endpoint's opt-in settings, and the budget
-- counters every worker shares.

-- One row per endpoint that opted in: the validated llm_triage document (defaults filled).
CREATE TABLE llm_triage (
    endpoint_id  uuid PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    config       jsonb NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Prompts spent per endpoint and window ('minute': the UTC minute, 'day': the UTC day).
-- A prompt is reserved with INSERT ... ON CONFLICT DO UPDATE ... WHERE used < limit
-- RETURNING, so concurrent workers serialize on the row and never pass the limit.
CREATE TABLE llm_triage_budget (
    endpoint_id   uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    span          text NOT NULL CHECK (span IN ('minute', 'day')),
    window_start  timestamptz NOT NULL,
    used          integer NOT NULL CHECK (used >= 0),
    PRIMARY KEY (endpoint_id, span, window_start)
);
