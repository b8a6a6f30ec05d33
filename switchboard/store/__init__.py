"""Store."""
