"""Host replicas on one PostgreSQL database: the signal path between them (`bus.py`: LISTEN/NOTIFY and
the mailbox table), the live replicas and the takeover of lost ones (`replicas.py`), and how an
operation on a run reaches the replica that runs it (`routing.py`)."""
