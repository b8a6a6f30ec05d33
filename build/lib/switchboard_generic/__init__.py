"""First-party plugin: generic."""
