"""The fleet example (`examples/fleet/`): the replica's config loads, and the Envoy config in front of
the replicas has what a fleet needs (checked by parsing it: Envoy itself is not installed here): one
listener routing every gRPC method to one cluster of replicas over HTTP/2, round robin, health-checked
through the gRPC health service, and no timeout that would cut a run's long streams."""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from agentrunner_host.config.model import load_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLEET = ROOT / "examples" / "fleet"


def _envoy() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((FLEET / "envoy.yaml").read_text())
    return data["static_resources"]


def _manager(resources: dict[str, Any]) -> dict[str, Any]:
    (listener,) = resources["listeners"]
    (chain,) = listener["filter_chains"]
    (hcm,) = chain["filters"]
    assert hcm["name"] == "envoy.filters.network.http_connection_manager"
    config: dict[str, Any] = hcm["typed_config"]
    return config


def test_the_replica_config_loads_and_advertises_the_balancer() -> None:
    config = load_config(FLEET / "host.yaml")
    assert config.listen.advertise_address == "agentrunner-lb:50443"
    port = _envoy()["listeners"][0]["address"]["socket_address"]["port_value"]
    assert config.listen.advertise_address.endswith(f":{port}")  # the runners dial back through Envoy
    assert config.fleet.lease_seconds <= 15  # the bound on a takeover


def test_envoy_routes_every_method_to_health_checked_replicas_without_timeouts() -> None:
    resources = _envoy()
    manager = _manager(resources)
    assert manager["codec_type"] == "HTTP2"
    assert manager["http_filters"][-1]["name"] == "envoy.filters.http.router"
    (host,) = manager["route_config"]["virtual_hosts"]
    (route,) = host["routes"]
    assert route["match"] == {"prefix": "/"}
    assert route["route"]["timeout"] == "0s"  # (Envoy's default 15 s would end every longer run stream)
    assert int(manager["stream_idle_timeout"].removesuffix("s")) > 10  # above the control heartbeat

    (cluster,) = resources["clusters"]
    assert cluster["name"] == route["route"]["cluster"]
    assert cluster["lb_policy"] == "ROUND_ROBIN"
    options = cluster["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]
    assert "http2_protocol_options" in options["explicit_http_config"]  # gRPC to the replicas
    (check,) = cluster["health_checks"]
    assert check["grpc_health_check"] == {}  # the host's grpc.health.v1 service, whole-host status
    endpoints = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    ports = {e["endpoint"]["address"]["socket_address"]["port_value"] for e in endpoints}
    assert len(endpoints) >= 2 and ports == {50051}
    assert load_config(FLEET / "host.yaml").listen.address.endswith(":50051")
