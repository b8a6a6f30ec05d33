"""First-party plugin: gitea."""
