"""Routing (host side): the envelope, the routing config and its validation, stages in order, decide, the dry run and the trace."""
