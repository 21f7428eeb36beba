"""The run path: one `RunService` for the host, one `RunExecution` per open run (see
docs/architecture.md for the data flow of one run)."""
