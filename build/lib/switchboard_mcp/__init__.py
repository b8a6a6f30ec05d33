"""First-party plugin: mcp."""
