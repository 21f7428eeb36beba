"""Runtimes that dial in (`docs/runtimes.md`): their credentials (`gate.py`), the `RuntimeService` servicer
(`service.py`), the registry of connected runtimes and the placement of runs on them (`registry.py`), and
the slot calls a run's reader reads like a dialed runner's (`calls.py`)."""
