"""The demos behind `make demo`, `make demo-services`, `make demo-claude` and `make demo-codex`."""
