"""Whose address a public request is, and the rate limit per address of the paths open without a token.

`/public/…` and `/.well-known/jwks.json` answer anyone: `PETRECORDS_PUBLIC_RATE_LIMIT` requests a minute per
client address (the callers' limit of `petrecords.ratelimit`, in Redis when `PETRECORDS_REDIS_URL` is set, so that
every instance counts alike), checked before any database read, so that a flood from one address costs nothing
but the count.

The address is the peer's, unless the peer is one of `PETRECORDS_TRUSTED_PROXIES`: then it is the right-most
`X-Forwarded-For` entry that is not one of them, since each proxy appends the address it was called from and only
the entries that trusted proxies appended can be believed. An IPv6 client is counted by its /64, the block a
single network is given, so that one host cannot take a fresh budget from each of its 2^64 addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from petrecords.ratelimit import RateLimiter, create_rate_limiter

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV6_CLIENT_PREFIX = 64
"""An IPv6 client is counted with the whole block of this length around its address."""
MAX_FORWARDED_ENTRIES = 64
"""The most X-Forwarded-For entries read, from the right: no chain of proxies is longer."""


class TrustedProxies:
    """The proxies in front of the service (addresses and CIDR ranges), and whose address a request is."""

    def __init__(self, entries: Iterable[str]) -> None:
        self._networks: tuple[Network, ...] = tuple(ipaddress.ip_network(entry, strict=True) for entry in entries)

    def __contains__(self, address: Address) -> bool:
        return any(address.version == network.version and address in network for network in self._networks)

    def client_of(self, peer: str | None, forwarded_for: Sequence[str]) -> str:
        """The address a public request is counted against, as text: the peer's, or, when the peer is a trusted
        proxy, the right-most `X-Forwarded-For` entry that is not (`forwarded_for` holds the header's values, in
        the order they came; several headers are one list, as RFC 9110 joins them).

        An entry that is not an address (`unknown`, an obfuscated name, garbage) ends the walk: the request is
        counted against the proxy that wrote it, the entry to its right, or the peer. A malformed entry never gives
        a fresh budget; at worst, the requests a proxy forwards that way share one. When every entry is a trusted
        proxy, the left-most is the client. A peer that is no address (a Unix socket) counts as one client.
        """
        peer_address = parse_address(peer) if peer is not None else None
        if peer_address is None:
            return peer or "unknown"
        if not self._networks or peer_address not in self:
            return client_key(peer_address)
        nearest = peer_address
        for entry in _entries_from_the_right(forwarded_for):
            address = parse_address(entry)
            if address is None:
                break
            nearest = address
            if address not in self:
                break
        return client_key(nearest)


def _entries_from_the_right(values: Sequence[str]) -> list[str]:
    entries: list[str] = []
    for value in reversed(values):
        for entry in reversed(value.split(",")):
            entries.append(entry)
            if len(entries) == MAX_FORWARDED_ENTRIES:
                return entries
    return entries


def parse_address(text: str) -> Address | None:
    """An IP address as X-Forwarded-For or a peer gives it: `192.0.2.1`, `2001:db8::1`, with a port
    (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or in brackets; an IPv4 address in IPv6 form (`::ffff:192.0.2.1`)
    is that IPv4 address. None for anything else, zone identifiers (`fe80::1%eth0`) included."""
    entry = text.strip(" \t")
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        entry = host
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if not port.isdigit():
            return None
        entry = host
    try:
        address = ipaddress.ip_address(entry)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return None
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
    return address


def client_key(address: Address) -> str:
    """What a client is counted by: its IPv4 address, or its IPv6 address's /64."""
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False)
        return str(network)
    return str(address)


PUBLIC_KEY_PREFIX = "public:"
"""Keeps the addresses' counts apart from the callers' in Redis (an e-mail address holds no colon)."""


def create_public_rate_limit(*, per_minute: int, redis_url: str | None) -> RateLimiter | None:
    """`per_minute` requests per client (the key `TrustedProxies.client_of` gives); None when off (0). A hit
    answers None when allowed, else the whole seconds to wait (the Retry-After of the 429)."""
    return create_rate_limiter(per_minute=per_minute, redis_url=redis_url, key_prefix=PUBLIC_KEY_PREFIX)
