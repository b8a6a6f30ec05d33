-- Humans own endpoints; friendships let one human's webhook route to another's endpoints.
CREATE TABLE humans (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Directed: from_human grants to_human; only 'approved' authorizes routes.
CREATE TABLE friendships (
    from_human  uuid NOT NULL REFERENCES humans (id) ON DELETE CASCADE,
    to_human    uuid NOT NULL REFERENCES humans (id) ON DELETE CASCADE,
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'approved', 'revoked')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_human, to_human),
    CHECK (from_human <> to_human)
);

-- An endpoint is an agent credential: a token (stored as a hash), a queue scope, a
-- verb scope and a ceiling on the webhooks it may own. Scope is immutable: re-vend.
CREATE TABLE endpoints (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_human           uuid NOT NULL REFERENCES humans (id) ON DELETE CASCADE,
    name                  text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    token_hash            text NOT NULL UNIQUE,
    scope_queues          text[] NOT NULL DEFAULT '{}',
    verbs                 text[] NOT NULL DEFAULT '{}',
    webhook_queues        text[] NOT NULL DEFAULT '{}',
    webhook_source_types  text[] NOT NULL DEFAULT '{}',
    webhook_max           integer NOT NULL DEFAULT 0 CHECK (webhook_max >= 0),
    state                 text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'revoked')),
    expires_at            timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    revoked_at            timestamptz
);
CREATE INDEX idx_endpoints_owner ON endpoints (owner_human);
