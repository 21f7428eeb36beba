from agentrunner_host.cli import main

main()
