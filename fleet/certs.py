"""A private CA and a server certificate it signed, made on the spot with the ``openssl`` command:
for a local fleet tried with TLS (``./dev run --balancer haproxy --tls-cert``), the tests and the
TLS benchmark. Never a production certificate, and never committed: the keys live in the
directory given, readable by their owner only.

    python -m fleet.certs var/tls          # var/tls/ca.pem (for clients' --ca-file), var/tls/server.pem

``server.pem`` holds the certificate then its key, as haproxy's ``crt`` wants; its names are
``localhost``, ``127.0.0.1`` and ``::1`` (and any ``--name``), valid for 30 days.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from leaderboard.settings import argument_parser

DAYS = 30
NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Certificates:
    ca: Path  # the CA's certificate: what a client trusts (--ca-file)
    server: Path  # the server's certificate then its key (haproxy's crt)


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl is not installed (Debian's openssl package)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make(directory: Path, names: tuple[str, ...] = NAMES, days: int = DAYS) -> Certificates:
    """A new CA (its key stays in ``directory``) and a server certificate for ``names`` (EC P-256
    keys: every TLS client takes them, and their signatures cost less than RSA's)."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_key, ca, key, csr, crt = (directory / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.crt"))
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl("req", "-x509", *curve, "-keyout", str(ca_key), "-out", str(ca), "-days", str(days),
             "-subj", "/CN=leaderboard private CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _openssl("req", *curve, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={names[0]}")
    alt = ",".join(f"IP:{n}" if _is_ip(n) else f"DNS:{n}" for n in names)
    extensions = directory / "server.ext"
    extensions.write_text(f"subjectAltName={alt}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(crt), "-days", str(days), "-extfile", str(extensions))  # fmt: skip
    server = directory / "server.pem"
    server.touch(mode=0o600)
    server.write_text(crt.read_text() + key.read_text())
    for leftover in (csr, crt, key, extensions):
        leftover.unlink()
    return Certificates(ca, server)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m fleet.certs", (__doc__ or "").split("\n\n")[0])
    p.add_argument("directory", type=Path, help="where ca.pem, ca.key and server.pem are written")
    p.add_argument("--name", action="append", default=[], help="another name the certificate is for (repeat)")
    args = p.parse_args(argv)
    try:
        made = make(args.directory, (*NAMES, *args.name))
    except (RuntimeError, OSError) as exc:
        print(f"fleet.certs: {exc}", file=sys.stderr)
        return 1
    print(f"CA (clients' --ca-file): {made.ca}\ncertificate and key (--tls-cert): {made.server}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
