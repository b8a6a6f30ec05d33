"""Service layer."""
