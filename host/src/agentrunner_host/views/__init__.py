"""Protocol messages as data and timelines for people (the CLI and the console)."""
