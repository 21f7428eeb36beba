"""`agentrunner.fleet.fleet_target`: the gRPC target and options the SDK's channel (and the CLI) use
for an address naming several host replicas."""

from __future__ import annotations

import json

import pytest

from agentrunner.client import ApiKey, ClientCredentials, ClientCredentialsError, host_service_channel
from agentrunner.fleet import FleetAddressError, fleet_target


def _config(options: list[tuple[str, object]]) -> dict[str, object]:
    return dict(json.loads(str(dict(options)["grpc.service_config"])))


def test_one_address_is_used_as_it_is() -> None:
    assert fleet_target("10.0.0.1:50443") == ("10.0.0.1:50443", [])
    assert fleet_target("unix:/run/host.sock") == ("unix:/run/host.sock", [])


def test_a_list_is_one_round_robin_target_with_health_checks() -> None:
    target, options = fleet_target("10.0.0.1:1, 10.0.0.2:2,[::1]:3")
    assert target == "ipv4:10.0.0.1:1,10.0.0.2:2"  # one scheme per target: IPv4 first
    assert _config(options) == {
        "loadBalancingConfig": [{"round_robin": {}}],
        "healthCheckConfig": {"serviceName": ""},
    }
    assert dict(options)["grpc.default_authority"] == "10.0.0.1:1"
    assert fleet_target("[::1]:1,[::1]:2")[0] == "ipv6:[::1]:1,[::1]:2"
    named, _ = fleet_target("localhost:7,localhost:8")  # names resolved once, here
    assert "127.0.0.1:7" in named or "[::1]:7" in named


def test_a_dns_target_balances_over_what_it_resolves_to() -> None:
    target, options = fleet_target("dns:///hosts.internal:50443")
    assert target == "dns:///hosts.internal:50443"
    assert _config(options)["loadBalancingConfig"] == [{"round_robin": {}}]


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("10.0.0.1:1,10.0.0.2", "'10.0.0.2' is not host:port"),
        ("10.0.0.1:1,no-such-host.invalid:2", "does not resolve"),
    ],
)
def test_a_bad_list_is_one_clear_error(address: str, message: str) -> None:
    with pytest.raises(FleetAddressError, match=message):
        fleet_target(address)


@pytest.mark.asyncio
async def test_an_api_key_goes_in_clear_only_when_every_replica_is_local() -> None:
    key = ClientCredentials(api_key=ApiKey("k", "test"))
    await host_service_channel("127.0.0.1:1,127.0.0.1:2", key).close()  # (a channel connects lazily)
    with pytest.raises(ClientCredentialsError, match="refusing to send the API key in clear"):
        host_service_channel("127.0.0.1:1,10.0.0.2:2", key)
