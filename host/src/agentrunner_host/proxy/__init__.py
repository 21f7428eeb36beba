"""The proxy service: what a runner may ask the host for during its run, authenticated and checked against the run's frozen snapshot."""
