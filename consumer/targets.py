"""``--target`` read before any connection, as gRPC's naming rules read it: a usage error
(one line, exit 2) for a target gRPC would take some other way than the user meant.

* no scheme: ``HOST:PORT`` or ``[V6]:PORT``, the port 1 to 65535 (gRPC would default a
  missing port to 443, and reads ``localhost:99999`` as another port modulo 65536);
* ``dns:[//AUTHORITY/]HOST[:PORT]``: a host, and a port 1 to 65535 if one is given;
* ``ipv4:A[:PORT][,B[:PORT]...]`` / ``ipv6:[A][:PORT],...``: address literals of that
  family, each port 1 to 65535;
* ``unix:PATH``, ``unix:///ABSOLUTE``, ``unix-abstract:NAME``: a non-empty path;
* ``vsock:CID:PORT``: two whole numbers.

Any other ``SCHEME://`` is not a scheme gRPC knows here. Names are not looked up.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from replywire.shared.errors import ConfigurationError

MAX_PORT: Final = 65535
KNOWN_SCHEMES: Final = ("dns", "ipv4", "ipv6", "unix", "unix-abstract", "vsock")
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_HOST: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def check_target(target: str) -> None:
    """``ConfigurationError`` naming what is wrong with ``target``, if anything is."""
    problem = target_problem(target)
    if problem is not None:
        raise ConfigurationError(f"--target {target!r}: {problem}")


def target_problem(target: str) -> str | None:
    """What is wrong with ``target`` as the consumer's ``--target``; None if nothing."""
    if not target or not target.isprintable() or " " in target:
        return "a target is HOST:PORT or SCHEME:ADDRESS, no spaces"
    match = _SCHEME.match(target)
    scheme = match.group(1).lower() if match else ""
    if scheme in KNOWN_SCHEMES:
        return _scheme_problem(scheme, target[len(scheme) + 1 :])
    if match and match.group(2):
        return f"unknown scheme {scheme!r} (gRPC's: {', '.join(KNOWN_SCHEMES)})"
    return _address_problem(target, port_required=True)


def _scheme_problem(scheme: str, rest: str) -> str | None:
    if scheme in ("unix", "unix-abstract"):
        return None if rest.strip("/") else f"{scheme}: needs a socket path"
    if scheme == "vsock":
        cid, _, port = rest.partition(":")
        return None if cid.isdigit() and port.isdigit() else "vsock: is vsock:CID:PORT"
    if rest.startswith("//"):
        authority, slash, rest = rest[2:].partition("/")
        if not slash or (authority and scheme != "dns"):
            return f"{scheme}: is {scheme}:///ADDRESS (no authority)"
    if scheme == "dns":
        return _address_problem(rest, port_required=False)
    addresses = rest.split(",")
    for address in addresses:
        problem = _address_problem(address, port_required=False, family=scheme)
        if problem is not None:
            return problem
    return None


def _address_problem(address: str, *, port_required: bool, family: str = "") -> str | None:
    """``HOST[:PORT]`` or ``[V6][:PORT]`` (a bare IPv6 literal under ``ipv6:``)."""
    if address.startswith("["):
        host, bracket, after = address[1:].partition("]")
        if not bracket or (after and not after.startswith(":")):
            return f"{address!r}: an IPv6 address is [ADDRESS]:PORT"
        port: str | None = after[1:] if after else None
        kind = "ipv6"
    elif family == "ipv6" and address.count(":") > 1:
        host, port, kind = address, None, "ipv6"
    else:
        host, colon, port_text = address.rpartition(":")
        host, port = (host, port_text) if colon else (address, None)
        kind = "ipv4" if family == "ipv4" else "name"
    if port is None:
        if port_required:
            return f"{address!r} has no port: HOST:PORT"
    elif not (port.isdigit() and 1 <= int(port) <= MAX_PORT):
        return f"port {port!r} is not 1..{MAX_PORT}"
    return _host_problem(host, kind)


def _host_problem(host: str, kind: str) -> str | None:
    if kind == "name":
        return None if _HOST.fullmatch(host) else f"{host!r} is not a host name or address"
    try:
        version: int = ipaddress.ip_address(host).version
    except ValueError:
        version = 0
    return None if f"ipv{version}" == kind else f"{host!r} is not an {kind} address"
