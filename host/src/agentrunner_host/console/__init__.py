"""The web console: a debug chat, the runs list, run pages and the runners page, served by the host.

    browser ──HTTP (JSON, Server-Sent Events)──▶ console (Starlette, uvicorn in the host's event loop)
                                                   │ HostService over a private Unix socket
                                                   ▼
                                                 host (the same process)

The console is a client of `HostService` like any other (`backend.ConsoleBackend`): it sees what
every client sees, through the same validation and the same errors. It is off unless
`console.address` is set; on anything but loopback it requires a bearer token (`auth.py`).
"""
