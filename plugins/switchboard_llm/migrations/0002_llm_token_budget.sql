-- Token budgets: the tokens each window's calls cost, from the provider's usage (an
-- estimate from the prompt's length when it reports none), next to the prompts counted.
ALTER TABLE llm_triage_budget ADD COLUMN tokens bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0);
