"""`agentrunner.client` without a host: where the API key comes from (and which errors a user meets), that
it never shows in a repr, and when a channel refuses to send it (in clear to another machine). What a
host receives is tested on real sockets in tests/secured and tests/host/test_client_credentials.py."""

from __future__ import annotations

import pathlib

import grpc
import pytest

from agentrunner.client import (
    ApiKey,
    ClientCredentials,
    ClientCredentialsError,
    ClientTls,
    api_key_interceptors,
    host_service_channel,
    is_loopback_target,
    load_api_key,
)

KEY = "arh_unit-test-key-0123456789"


def test_the_key_comes_from_the_flag_file_else_the_file_variable_else_the_variable(
    tmp_path: pathlib.Path,
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"  {KEY}\n")
    other = tmp_path / "other"
    other.write_text("arh_other\n")
    assert load_api_key(environ={}) is None
    assert load_api_key(environ={"AGENTRUNNER_HOST_API_KEY": KEY}) == ApiKey(KEY, "AGENTRUNNER_HOST_API_KEY")
    from_file = load_api_key(environ={"AGENTRUNNER_HOST_API_KEY_FILE": str(key_file)})
    assert from_file is not None and from_file.value == KEY and str(key_file) in from_file.source
    flag = load_api_key(other, environ={"AGENTRUNNER_HOST_API_KEY": KEY})  # the flag wins
    assert flag is not None and flag.value == "arh_other" and flag.source == f"--api-key-file {other}"
    with pytest.raises(
        ClientCredentialsError, match="both AGENTRUNNER_HOST_API_KEY and AGENTRUNNER_HOST_API_KEY_FILE"
    ):
        load_api_key(
            environ={"AGENTRUNNER_HOST_API_KEY": KEY, "AGENTRUNNER_HOST_API_KEY_FILE": str(key_file)}
        )


def test_unusable_keys_are_one_line_errors_that_never_quote_the_key(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ClientCredentialsError, match=r"cannot read the API key file .*missing: No such file"):
        load_api_key(tmp_path / "missing")
    blank = tmp_path / "blank"
    blank.write_text("\n\n")
    with pytest.raises(ClientCredentialsError, match="is empty"):
        load_api_key(blank)
    with pytest.raises(ClientCredentialsError, match="a gRPC header cannot carry") as caught:
        load_api_key(environ={"AGENTRUNNER_HOST_API_KEY": "arh_two words"})
    assert "two words" not in str(caught.value)
    key = ApiKey(KEY, "AGENTRUNNER_HOST_API_KEY")
    assert KEY not in repr(key) and KEY not in repr(ClientCredentials(api_key=key))


def test_loopback_targets() -> None:
    for target in (
        "127.0.0.1:50051",
        "localhost:50051",
        "[::1]:50051",
        "unix:/tmp/host.sock",
        "127.8.9.10:1",
    ):
        assert is_loopback_target(target), target
    for target in ("10.0.0.5:50051", "host.example:50051", "[2001:db8::1]:50051", "0.0.0.0:50051"):
        assert not is_loopback_target(target), target


@pytest.mark.asyncio  # (a grpc.aio channel belongs to the running event loop)
async def test_a_key_goes_in_clear_only_to_this_machine_unless_a_proxy_terminates_tls(
    tmp_path: pathlib.Path,
) -> None:
    key = ApiKey(KEY, "test")
    with pytest.raises(
        ClientCredentialsError, match=r"refusing to send the API key in clear to 10\.0\.0\.5:50051"
    ):
        host_service_channel("10.0.0.5:50051", ClientCredentials(api_key=key))
    await host_service_channel("10.0.0.5:50051", ClientCredentials(api_key=key, allow_plaintext=True)).close()
    await host_service_channel("10.0.0.5:50051").close()  # no key: nothing to protect
    with pytest.raises(ClientCredentialsError, match="needs both files"):
        host_service_channel("h:1", ClientCredentials(tls=ClientTls(cert_file=tmp_path / "c.pem")))
    with pytest.raises(ClientCredentialsError, match=r"cannot read the CA file .*ca.pem"):
        host_service_channel("h:1", ClientCredentials(tls=ClientTls(ca_file=tmp_path / "ca.pem")))


def test_one_interceptor_per_call_kind() -> None:
    """grpc.aio uses an interceptor for the first kind it is an instance of only: each object must be
    exactly one kind, and together they must cover all four."""
    kinds = (
        grpc.aio.UnaryUnaryClientInterceptor,
        grpc.aio.UnaryStreamClientInterceptor,
        grpc.aio.StreamUnaryClientInterceptor,
        grpc.aio.StreamStreamClientInterceptor,
    )
    interceptors = api_key_interceptors(ApiKey(KEY, "test"))
    covered = [[kind for kind in kinds if isinstance(i, kind)] for i in interceptors]
    assert all(len(c) == 1 for c in covered) and {c[0] for c in covered} == set(kinds)
