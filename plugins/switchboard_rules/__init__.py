"""First-party plugin: rules."""
