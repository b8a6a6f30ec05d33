-- Model calls in flight per provider, across every serve on this database: a row per
-- call, taken under the provider's advisory lock while fewer than its cap are live, and
-- deleted when the call ends. A killed worker's row lapses at ``until``.
CREATE TABLE llm_in_flight (
    id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    provider  text NOT NULL,
    holder    text NOT NULL,
    until     timestamptz NOT NULL
);
CREATE INDEX llm_in_flight_provider ON llm_in_flight (provider, until);
