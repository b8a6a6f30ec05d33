"""Routing: the envelope, rule validation, the sandbox, decide and the trace."""
