"""SQLite techniques of the embedded backend, behind `store.db.Database`: connection settings
(`connection`), the writer thread with group commit (`writer`), statements compiled once and run on the
driver (`compiled`) and the WAL checkpointer (`checkpoint`)."""
