"""`python -m agentrunner ...`."""

from agentrunner.cli import main

main()
