"""What serves an event: bindings to agents, runner endpoints and their manifests, and the config checks against them."""
