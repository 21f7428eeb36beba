"""gRPC servicers of the host: thin adapters over the transport-neutral run service (`run/`)."""
