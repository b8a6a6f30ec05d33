"""First-party plugin: cairn."""
