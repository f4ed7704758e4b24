"""Models the built-in runtime trains, and the entry point for user-supplied ones."""
