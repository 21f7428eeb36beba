"""Local stand-ins for external services (the demo and the test suite use them; never in production)."""
