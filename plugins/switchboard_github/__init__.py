"""First-party plugin: github."""
