"""Model adapters: each model runs as a subprocess with its own command (SPEC §1)."""
