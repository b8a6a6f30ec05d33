-- GET /metrics counts the todos that are not done by queue and state at every scrape:
-- an index of only those rows keeps the scrape an index-only count however many done
-- todos a long-running install has kept.
CREATE INDEX idx_todos_open_by_queue ON todos (queue, state) WHERE state <> 'done';
