"""Test certificates made by openssl (no hand-rolled X.509): a CA, the host's certificate for localhost
and 127.0.0.1, client certificates from that CA, and a second CA whose certificates the host does not
trust."""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess

from agentrunner.client import ClientTls

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(d: pathlib.Path, name: str, ca: str, subject: str, *extra: str) -> None:
    """`name.key` / `name.pem`, signed by `ca` (extensions of the request, e.g. subjectAltName, kept)."""
    openssl(d, "req", *EC, "-subj", subject, *extra, "-keyout", f"{name}.key", "-out", f"{name}.csr")
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-copy_extensions", "copy", "-out", f"{name}.pem")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Pki:
    dir: pathlib.Path

    def path(self, name: str) -> pathlib.Path:
        return self.dir / name

    def tls(self, client: str | None = None) -> ClientTls:
        """Client TLS verifying the host, presenting `client`'s certificate when given."""
        if client is None:
            return ClientTls(ca_file=self.path("ca.pem"))
        return ClientTls(self.path("ca.pem"), self.path(f"{client}.pem"), self.path(f"{client}.key"))


def make_pki(d: pathlib.Path, clients: tuple[str, ...] = ()) -> Pki:
    """`ca`, `other-ca`, `host` (localhost, 127.0.0.1) and each of `clients` (CN=name) from `ca`."""
    for ca in ("ca", "other-ca"):
        openssl(
            d,
            "req",
            "-x509",
            *EC,
            "-days",
            "2",
            "-subj",
            f"/CN={ca}",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
        )
    issue(d, "host", "ca", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    for name in clients:
        issue(d, name, "ca", f"/CN={name}")
    return Pki(d)
