"""One-line explanations of transport failures (gRPC jargon translated for people).

gRPC reports a host that is down, a name that does not resolve and a TLS mismatch alike as
`UNAVAILABLE` with C-core text ("failed to connect to all addresses; last error: UNKNOWN: ipv4:...").
`explain_rpc_failure` turns those into sentences that say what is wrong and what to try; the CLI prints
them and the registry keeps them as an endpoint's last error. `explain_bind_failure` does the same for
a listen address that cannot be bound (naming the port and, when it can be found, the process holding
it).
"""

from __future__ import annotations

import errno
import re
import socket


class ListenError(OSError):
    """An address the host cannot listen on; the message says which, and why (port in use, ...)."""


_LAST_ERROR = re.compile(r"last error: (?:[A-Z_]+: )?(?:ipv[46]:[^ ]+: |unix:[^ ]+: )?(?P<text>.*)$")


def _host_of(target: str) -> str:
    host = target.rsplit(":", 1)[0] if ":" in target else target
    return host.strip("[]")


def explain_rpc_failure(
    code: str,
    details: str,
    target: str,
    *,
    timeout: float | None = None,
    tls: bool = False,
    client_cert: str = "",
) -> str | None:
    """A sentence for a call that failed in transport (`code` is the status code's name); None when the
    call reached a server (its own error then says what happened). `tls`: the call went over TLS;
    `client_cert`: the client certificate it presented ('' for none)."""
    text = details or ""
    if code == "DEADLINE_EXCEEDED" and text in ("Deadline Exceeded", ""):
        within = f" within {timeout:g} s" if timeout else " in time"
        return f"{target} did not answer{within} (is it the right address, and is the server healthy?)"
    if code != "UNAVAILABLE":
        return None
    return (
        _address_failure(text, target)
        or _tls_failure(text, target, tls=tls, client_cert=client_cert)
        or _connection_failure(text, target)
    )


def _address_failure(text: str, target: str) -> str | None:
    """A name that does not resolve, or an address where nothing listens."""
    if "errors resolving" in text or "DNS resolution failed" in text:
        if "Misformatted domain name" in text:
            return f"{target!r} is not a valid host:port address"
        return f"cannot resolve the host name {_host_of(target)!r} of {target} (DNS lookup failed)"
    if "Connection refused" in text:
        return f"cannot reach {target}: connection refused (nothing listens there: is the server running?)"
    return None


def _tls_failure(text: str, target: str, *, tls: bool, client_cert: str) -> str | None:
    """A TLS handshake that failed, and which side's credentials to look at."""
    if "WRONG_VERSION_NUMBER" in text:
        return (
            f"TLS handshake with {target} failed: the server does not speak TLS "
            "(drop --tls / --ca-file, or give the server a certificate)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        why = text.split("CERTIFICATE_VERIFY_FAILED:", 1)[-1].split(":", 1)[0].strip()
        return (
            f"TLS handshake with {target} failed: its certificate is not trusted ({why or 'verify failed'}); "
            "pass the CA that signed it (--ca-file)"
        )
    if "Hostname Verification" in text or "hostname mismatch" in text.lower():
        return (
            f"TLS: the certificate of {target} does not name {_host_of(target)!r} "
            "(connect by a name the certificate lists)"
        )
    if "Tls handshake failed" in text or "SSL_ERROR" in text or "handshake" in text.lower():
        return f"TLS handshake with {target} failed (check the CA, the client certificate and the key)"
    if not (tls and ("Socket closed" in text or "Connection reset" in text)):
        return None
    # a server that requires mutual TLS closes the connection after a handshake without a client
    # certificate it accepts (TLS 1.3 reports nothing else to the client)
    if client_cert:
        return (
            f"{target} closed the connection during the TLS handshake: it did not accept the client "
            f"certificate {client_cert} (is it signed by the CA of the host's listen.tls.client_ca_file, "
            "and still valid?)"
        )
    return (
        f"{target} closed the connection during the TLS handshake: it requires a client certificate "
        "(mutual TLS): pass --cert-file and --key-file (or set AGENTRUNNER_HOST_CERT_FILE and "
        "AGENTRUNNER_HOST_KEY_FILE)"
    )


def _connection_failure(text: str, target: str) -> str | None:
    """A connection that closed, found no route or timed out; else gRPC's own last error."""
    if "Socket closed" in text or "Connection reset" in text:
        return (
            f"{target} closed the connection during setup: it may expect TLS (pass --ca-file or --tls), "
            "or it is not a gRPC server"
        )
    if "No route to host" in text or "Network is unreachable" in text:
        return f"cannot reach {target}: no route to the host (network unreachable)"
    if "Timeout occurred" in text or "timed out" in text.lower():
        return f"cannot reach {target}: the connection attempt timed out"
    match = _LAST_ERROR.search(text)
    if match:
        return f"cannot reach {target}: {match.group('text')}"
    if "failed to connect" in text:
        return f"cannot reach {target}"
    return None


def port_holder(port: int) -> str:
    """`pid N (name)` of the process listening on `port`, when this process may see it; else ''."""
    try:
        import psutil

        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                try:
                    name = psutil.Process(conn.pid).name()
                except psutil.Error:
                    name = "?"
                return f"pid {conn.pid} ({name})"
    except Exception:  # no permission, no psutil: the port alone must do
        return ""
    return ""


def _probe_errno(address: str) -> int | None:
    """gRPC reports a failed bind without a reason: binding a plain socket there tells which it is."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    if not port_text.isdigit():
        return None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, int(port_text)))
    except OSError as exc:
        return exc.errno
    return None


def explain_bind_failure(what: str, address: str, exc: BaseException | None = None) -> str:
    """`what` (e.g. 'the gRPC listen address') cannot be bound at `address`: why, in one line."""
    _, _, port_text = address.rpartition(":")
    port = int(port_text) if port_text.isdigit() else 0
    code = getattr(exc, "errno", None) or _probe_errno(address)
    if code == errno.EADDRNOTAVAIL:
        return f"cannot listen on {address} ({what}): the address is not one of this machine's"
    if code in (errno.EACCES, errno.EPERM):
        return f"cannot listen on {address} ({what}): permission denied (ports below 1024 need privileges)"
    holder = port_holder(port) if port else ""
    held = f" by {holder}" if holder else ""
    return f"cannot listen on {address} ({what}): port {port} is already in use{held}"
