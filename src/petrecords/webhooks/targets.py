"""Where a webhook may deliver: the URL rule, checked when a URL is written, and the address rule, checked then
and again at each connection.

A URL is an absolute `https` URL of at most 2,000 characters, without user information or fragment, whose host
is, and resolves only to, public addresses: a webhook must not become a way to reach what the service's own
network hides (a cloud's metadata at 169.254.169.254, a database on 127.0.0.1, an intranet on 10.0.0.0/8).
PETRECORDS_WEBHOOKS_ALLOW_PRIVATE lifts both the `https` and the address rule, for private networks and tests.

Names are looked up on threads of the Resolver's own, never on the event loop, nor with the loop's own
`getaddrinfo` (the default executor's threads, or libuv's four under uvloop), which the database drivers look
their servers up with: a resolver that hangs delays only webhooks."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import re
import socket
from collections.abc import Callable, Sequence

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Lookup = Callable[[str, int], Sequence[str]]
"""A name's addresses, as text (blocking: run on the Resolver's threads)."""

MAX_URL_LENGTH = 2000
RESOLVE_SECONDS = 3.0
"""How long the check of a URL being written waits for its host's addresses."""

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network
_REFUSED_V4 = (
    (_V4("0.0.0.0/8"), "unspecified"),  # "this network": 0.0.0.0 reaches the host itself on many systems
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "reserved"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "benchmarking"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("255.255.255.255/32"), "broadcast"),
    (_V4("240.0.0.0/4"), "reserved"),
)
_REFUSED_V6 = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("64:ff9b:1::/48"), "private"),  # NAT64 for local use
    (_V6("2001::/32"), "reserved"),  # Teredo: the IPv4 address it reaches is hidden in it
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("3fff::/20"), "documentation"),
    (_V6("fc00::/7"), "private"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "private"),  # site-local, deprecated
    (_V6("ff00::/8"), "multicast"),
)
_GLOBAL_UNICAST = _V6("2000::/3")
_NAT64 = _V6("64:ff9b::/96")
"""Addresses that reach the IPv4 address in their last 32 bits through a NAT64 gateway."""
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def address_kind(address: IPAddress) -> str | None:
    """Why a webhook may not deliver to an address ("loopback", "private", "link-local", "multicast",
    "unspecified", ...), or None for a public one. An IPv6 address that carries an IPv4 one (mapped, NAT64, 6to4)
    is judged by the IPv4 address it reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or address.sixtofour
        if carried is None and address in _NAT64:
            carried = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        if carried is not None:
            return address_kind(carried)
        refused: tuple[tuple[_V4, str] | tuple[_V6, str], ...] = _REFUSED_V6
    else:
        refused = _REFUSED_V4
    for network, kind in refused:
        if address in network:
            return kind
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST:
        return "reserved"
    # The standard library's own registry, for what the tables above leave out.
    return None if address.is_global else "non-public"


def _an(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


class TargetProblem(Exception):
    """A host that a webhook may not deliver to, now."""

    requirement = "must name a host the service may deliver to"
    """What a URL must do, as the start of the validation message."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        """Why, in a few words that name the host: a delivery's error."""
        super().__init__(reason)

    @property
    def message(self) -> str:
        """The validation message of a URL being written."""
        return f"{self.requirement}: {self.reason}."


class AddressRefused(TargetProblem):
    requirement = "must name a public host"


class HostUnresolved(TargetProblem):
    requirement = "must name a host that resolves"


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def system_lookup(host: str, port: int) -> list[str]:
    """The addresses the system's resolver gives for a name (blocking)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


class Resolver:
    """Looks names up on threads of its own, with a time limit, and checks the addresses found."""

    THREADS = 8
    """Look-ups at once; a look-up that outlives its time limit keeps its thread until the system gives up."""

    def __init__(self, *, lookup: Lookup = system_lookup, threads: int = THREADS) -> None:
        self._lookup = lookup
        self._threads = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="webhook-resolver")

    async def addresses(self, host: str, port: int, *, within: float) -> list[IPAddress]:
        """The addresses of a host (an IP address is its own); HostUnresolved when it has none within `within`
        seconds."""
        literal = _ip_literal(host)
        if literal is not None:
            return [literal]
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(within):
                found = await loop.run_in_executor(self._threads, self._lookup, host, port)
        except TimeoutError:
            raise HostUnresolved(f"{host} did not resolve within {within:g} s") from None
        except (OSError, UnicodeError):  # socket.gaierror: no such name, or no resolver
            raise HostUnresolved(f"{host} does not resolve") from None
        addresses = list(dict.fromkeys(ipaddress.ip_address(text) for text in found))
        if not addresses:
            raise HostUnresolved(f"{host} does not resolve")
        return addresses

    async def checked(self, host: str, port: int, *, allow_private: bool, within: float) -> list[IPAddress]:
        """The addresses of a host, every one of them public (unless private ones are allowed); AddressRefused
        when one is not: a name that resolves to a public and a private address may reach either."""
        addresses = await self.addresses(host, port, within=within)
        if allow_private:
            return addresses
        for address in addresses:
            kind = address_kind(address)
            if kind is not None:
                relation = "is" if _ip_literal(host) is not None else "resolves to"
                raise AddressRefused(f"{host} {relation} {_an(kind)} address")
        return addresses

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)


def url_problem(url: str, *, allow_private: bool) -> str | None:
    """What is wrong with the form of a webhook's URL (a validation message), or None. Its host is not looked
    up: see target_problem."""
    schemes = "an https or http" if allow_private else "an https"
    absolute = f"must be {schemes} URL, such as https://example.com/webhooks."
    if len(url) > MAX_URL_LENGTH:
        return f"must be at most {MAX_URL_LENGTH} characters."
    authority = _AUTHORITY.match(url)
    if authority is None or "\\" in url or any(character.isspace() or not character.isprintable() for character in url):
        return absolute
    if "@" in authority.group(1):
        return "must not contain user information (user:password@)."
    if "#" in url:
        return "must not have a fragment (#…)."
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        return absolute
    if parsed.scheme == "http" and not allow_private:
        return "must use https: plain http is refused."
    if parsed.scheme not in ("https", "http") or not parsed.host:
        return absolute
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return "must have a port from 1 to 65535."
    if not _names_a_host(parsed.raw_host.decode("ascii")):
        return "must name its host by a domain name or an IP address."
    return None


def _names_a_host(host: str) -> bool:
    """An IP address (without an IPv6 zone, which names an interface of the service's machine), or a domain name
    whose last label is not a number (127.1 and 0x7f.1 stand for addresses in some resolvers)."""
    if _ip_literal(host) is not None:
        return "%" not in host
    labels = host.removesuffix(".").split(".")
    return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


async def target_problem(
    url: str,
    *,
    allow_private: bool,
    resolver: Resolver,
    within: float = RESOLVE_SECONDS,
    refuse_unresolved: bool = True,
) -> str | None:
    """What is wrong with a webhook's URL being written (the message of the `400` naming `url`), or None: its
    form, and, unless private addresses are allowed, each address its host resolves to now (within `within`
    seconds). `refuse_unresolved`: a host that does not resolve now is a problem too."""
    problem = url_problem(url, allow_private=allow_private)
    if problem is not None or allow_private:
        return problem
    parsed = httpx.URL(url)
    try:
        await resolver.checked(parsed.raw_host.decode("ascii"), parsed.port or 443, allow_private=False, within=within)
    except HostUnresolved as unresolved:
        return unresolved.message if refuse_unresolved else None
    except TargetProblem as refused:
        return refused.message
    return None
