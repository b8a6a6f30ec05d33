"""First-party plugin: doorbell."""
