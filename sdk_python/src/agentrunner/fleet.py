"""One address for a fleet of host replicas: the gRPC target and channel options for an address that
names several replicas.

A host address may be:

- one `host:port` (or `unix:path`, or any gRPC target): used as it is;
- several, comma-separated (`10.0.0.1:50443,10.0.0.2:50443` or `h1:50443,h2:50443`): one channel over
  all of them (gRPC's `ipv4:`/`ipv6:` target; host names are resolved once, here);
- a `dns:///name:port` target whose name resolves to several addresses (a headless service).

Either of the last two balances calls `round_robin` over the replicas and watches each one's standard
gRPC health service (a replica that is draining or stopped gets no new call). Each call sticks to the
replica it started on (a `Run` stream stays on its replica), and every operation works on any replica
of a fleet, so which one a call reaches does not matter to the caller. A load balancer in front
(`docs/scaling.md`, Envoy example) is the other way to give a fleet one address.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from typing import Any

#: the service config of a channel over several replicas: round robin, health-checked
FLEET_SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)


class FleetAddressError(ValueError):
    """An address list the client cannot use (an entry without a port, a name that does not resolve)."""


def _split(entry: str) -> tuple[str, str]:
    host, sep, port = entry.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetAddressError(f"{entry.strip()!r} is not host:port (in a comma-separated list of replicas)")
    return host.strip("[]"), port


def _resolved(host: str, port: str) -> list[str]:
    """`host`'s addresses as `ip:port` / `[ip6]:port` (an IP literal as it is)."""
    try:
        ips = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except OSError as exc:
            raise FleetAddressError(f"replica address {host}:{port} does not resolve: {exc}") from None
        ips = list(dict.fromkeys(str(info[4][0]) for info in found))
    return [f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips]


def fleet_target(address: str) -> tuple[str, list[tuple[str, Any]]]:
    """The gRPC target and the channel options for `address` (see the module docstring)."""
    address = address.strip()
    if address.startswith("dns:") and "," not in address:
        return address, [("grpc.service_config", FLEET_SERVICE_CONFIG)]
    if "," not in address or address.startswith(("ipv4:", "ipv6:", "unix:")):
        return address, []
    entries = [_split(entry) for entry in address.split(",") if entry.strip()]
    resolved = [ip for host, port in entries for ip in _resolved(host, port)]
    v6 = [a for a in resolved if a.startswith("[")]
    v4 = [a for a in resolved if not a.startswith("[")]
    # one scheme per target: IPv4 when there is any (a name resolving to both serves both)
    target = "ipv4:" + ",".join(v4) if v4 else "ipv6:" + ",".join(v6)
    first_host, first_port = entries[0]
    options: list[tuple[str, Any]] = [
        ("grpc.service_config", FLEET_SERVICE_CONFIG),
        # the authority (and TLS name) the replicas are known by: the first entry's, as written
        ("grpc.default_authority", f"{first_host}:{first_port}"),
    ]
    return target, options


def is_fleet_address(address: str) -> bool:
    """Whether `address` names several replicas (a comma-separated list or a `dns:` target)."""
    return "," in address or address.strip().startswith("dns:")
