"""The host process: one grpc.aio server with every service, health, reflection and the console."""
