"""Who may do what: client credentials for HostService, the run-scoped authorization snapshot."""
