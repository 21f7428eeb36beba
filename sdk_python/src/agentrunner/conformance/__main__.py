"""`python -m agentrunner.conformance runner|host --target HOST:PORT`."""

from agentrunner.conformance.cli import main

main()
