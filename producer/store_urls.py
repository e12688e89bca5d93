"""Where the producer keeps state (``--ledger``, ``--reply-log``): one parser for both flags.

A store is ``redis://``, ``rediss://`` or ``unix://`` (the scheme in any case: it is
lower-cased before redis-py sees it, whose synchronous URL parser only knows the
lower-case spellings), a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``,
one or more seed nodes ``HOST:PORT`` separated by commas: the client asks them for the
rest of the cluster, ``producer.redis_clients``), a file path (``--ledger``) or
``memory`` (``--reply-log``). Any other ``scheme://`` is refused: a mistyped scheme must
not quietly become a file named after the URL, its password included. A plain
``redis://`` URL that names a Cluster node is refused at start (``ClusterNode``): the node
answers PING, then redirects most keys.

A URL's password is never shown: :func:`redacted` drops the user info (everything before
the authority's last ``@``, however it is spelled) and the value of a ``password`` query
parameter (redis-py takes one from the query too), and :attr:`Store.secrets` lists what
to register with the trace scrubbers and to cut out of a library's error text. User info
without a colon counts as a secret too: ``redis://SECRET@host`` is a common slip for
``redis://:SECRET@host``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final
from urllib.parse import unquote, unquote_plus, urlsplit

#: A URL's scheme, as RFC 3986 spells one, followed by ``://``.
SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: A scheme and its colon, with or without the slashes.
LOOSE_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/*")
#: One ``name=value`` of a query (``&`` or ``;`` between them).
QUERY_PAIR: Final = re.compile(r"(^|[&;])([^=&;]*)=([^&;#]*)")
REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
#: A Redis Cluster, found from its seed nodes (``producer.redis_clients``).
CLUSTER_SCHEMES: Final = ("redis+cluster", "rediss+cluster")
MEMORY: Final = "memory"
HIDDEN: Final = "***"
#: The query parameters whose values are secrets (redis-py reads ``password`` from the query).
SECRET_PARAMETERS: Final = frozenset({"password"})
#: What the producer says of a Redis Cluster node given as a lone server's URL. A node
#: answers PING as a lone server does, then redirects (``MOVED``) every key it does not
#: own: the cluster's own scheme reaches every node.
CLUSTER_UNSUPPORTED: Final = (
    "is a Redis Cluster node: name the cluster as redis+cluster://HOST:PORT[,HOST:PORT...]"
)
#: What the producer says of a lone server given as a cluster.
NOT_A_CLUSTER: Final = "is not a Redis Cluster (INFO cluster says cluster_enabled:0)"


class ClusterNode(Exception):
    """A store's Redis is a Cluster node named as a lone server, or the other way round:
    refused at start."""


def refuse_cluster(info: Mapping[str, object], *, cluster: bool = False) -> None:
    """Raise ``ClusterNode`` unless ``INFO cluster``'s answer agrees with how the store was
    named: a cluster node only through a cluster URL, a lone server only through a plain one."""
    enabled = str(info.get("cluster_enabled", "0")) == "1"
    if enabled and not cluster:
        raise ClusterNode(CLUSTER_UNSUPPORTED)
    if cluster and not enabled:
        raise ClusterNode(NOT_A_CLUSTER)


class StoreKind(Enum):
    FILE = "file"
    MEMORY = "memory"
    REDIS = "redis"


@dataclass(frozen=True, slots=True)
class Store:
    """One ``--ledger`` or ``--reply-log`` value, classified."""

    kind: StoreKind
    #: What the store is opened with: the URL with its scheme lower-cased, the path, "memory".
    target: str
    #: What a message or a trace record may say: the URL without its user info or password.
    shown: str
    #: The password's spellings (as written, percent-decoded; from the user info or the
    #: query), longest first.
    secrets: tuple[str, ...] = ()
    #: A Redis Cluster (``redis+cluster://``): ``target`` names its seed nodes.
    cluster: bool = False

    def redact(self, text: str) -> str:
        """``text`` (an error's message, say) with the URL and every secret replaced."""
        if self.target != self.shown:
            text = text.replace(self.target, self.shown)
        for secret in self.secrets:
            text = text.replace(secret, HIDDEN)
        return text


class StoreError(ValueError):
    """A value no store answers to; the message names the accepted ones, never a password."""


def parse_store(spec: str, *, memory: bool = False, files: bool = False) -> Store:
    """Classify ``spec``: a Redis URL, or (when allowed) ``memory`` or a file path."""
    *others, last = [
        *(f"{scheme}://" for scheme in (*REDIS_SCHEMES, *CLUSTER_SCHEMES)),
        *([MEMORY] if memory else []),
        *(["a file path"] if files else []),
    ]
    accepted = f"{', '.join(others)} or {last}"
    match = SCHEME.match(spec)
    if match is None:
        if memory and spec == MEMORY:
            return Store(StoreKind.MEMORY, spec, spec)
        if files and spec and not _mangled_url(spec):
            return Store(StoreKind.FILE, spec, spec)
        raise StoreError(f"{redacted(spec)!r} is not a store; give {accepted}")
    scheme = match.group(1).lower()
    if scheme not in REDIS_SCHEMES and scheme not in CLUSTER_SCHEMES:
        raise StoreError(
            f"{redacted(spec)!r}: {match.group(1)}:// is not a scheme this producer speaks; "
            f"give {accepted} (the scheme in any case)"
        )
    target = scheme + spec[len(scheme) :]
    cluster = scheme in CLUSTER_SCHEMES
    if cluster:
        cluster_nodes(target)  # raises StoreError for a seed list it cannot read
    return Store(StoreKind.REDIS, target, redacted(target), url_secrets(target), cluster)


def cluster_nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A cluster URL as a lone node's URL (``redis://`` or ``rediss://``, with the user info
    and query, the first seed as its host) and every seed node ``(host, port)``."""
    match = SCHEME.match(url)
    if match is None or match.group(1).lower() not in CLUSTER_SCHEMES:
        raise StoreError(f"{redacted(url)!r} is not a cluster URL")
    scheme = match.group(1).lower().partition("+")[0]
    rest = url[match.end() :]
    where, mark, query = rest.partition("?")
    userinfo, at, hosts = where.rpartition("@")
    hosts, _, path = hosts.partition("/")
    if path not in ("", "0"):
        raise StoreError(f"{redacted(url)!r}: a Redis Cluster has database 0 only")
    seeds: list[tuple[str, int]] = []
    for seed in hosts.split(","):
        host, colon, port = seed.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise StoreError(
                f"{redacted(url)!r}: give the cluster's seed nodes as HOST:PORT[,HOST:PORT...]"
            )
        seeds.append((host.strip("[]"), int(port)))
    first_host, first_port = seeds[0]
    first = f"[{first_host}]:{first_port}" if ":" in first_host else f"{first_host}:{first_port}"
    return f"{scheme}://{userinfo}{at}{first}/0{mark}{query}", seeds


def _mangled_url(spec: str) -> bool:
    """A URL with its "//" mistyped ("redis:/host", "valkey:/:pw@host", "redis:host:6379"):
    never taken for a file path."""
    scheme = LOOSE_SCHEME.match(spec)
    return scheme is not None and (
        scheme.group(0).endswith("/") or scheme.group(1).lower() in REDIS_SCHEMES
    )


def redacted(spec: str) -> str:
    """``spec`` without a URL's user info and without a ``password`` parameter's value (text
    that is no URL: without what comes before its last "@", but a scheme-like prefix)."""
    match = SCHEME.match(spec)
    if match is None:
        if "@" not in spec:
            return spec
        loose = LOOSE_SCHEME.match(spec)
        return f"{loose.group(0) if loose else ''}{HIDDEN}@{spec.rpartition('@')[2]}"
    head, rest = spec[: match.end()], spec[match.end() :]
    # The user info ends at the last "@" before the query: a password with an unescaped
    # "/" or "@" in it must not spill into what is shown as the host or the path.
    where, mark, query = rest.partition("?")
    if "@" in where:
        where = where.rpartition("@")[2]
    if mark:
        query = QUERY_PAIR.sub(
            lambda m: f"{m[1]}{m[2]}={HIDDEN}" if _is_secret(m[2]) else m[0], query
        )
    return f"{head}{where}{mark}{query}"


def url_secrets(url: str) -> tuple[str, ...]:
    """Every spelling of the password a URL carries: its user info (whole, as written, and
    the password as redis-py reads it, percent-decoded), and a ``password`` parameter."""
    match = SCHEME.match(url)
    rest = url[match.end() :] if match else url
    where, _, query = rest.partition("?")
    found: set[str] = set()
    if "@" in where:
        userinfo = where.rpartition("@")[0]
        # As written (up to the last "@"), and as redis-py reads it (urlsplit's password).
        for item in (userinfo, userinfo.partition(":")[2], urlsplit(url).password or ""):
            found |= {item, unquote(item)}
    for pair in QUERY_PAIR.finditer(query):
        if _is_secret(pair[2]):
            found |= {pair[3], unquote_plus(pair[3])}
    found.discard("")
    return tuple(sorted(found, key=len, reverse=True))


def _is_secret(name: str) -> bool:
    return unquote_plus(name).lower() in SECRET_PARAMETERS
