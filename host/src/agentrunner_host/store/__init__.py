"""The host's fact stores on SQLite (embedded) or PostgreSQL (production); see `fact_stores.py`."""
