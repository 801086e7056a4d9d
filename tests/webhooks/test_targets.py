"""Where a webhook may deliver (webhooks.targets): the URL rule, the address rule with its kinds of non-public
addresses, and the check of a URL being written, which looks its host up off the event loop, within a time
limit, on threads of its own."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from petrecords.webhooks.targets import (
    MAX_URL_LENGTH,
    AddressRefused,
    IPAddress,
    Resolver,
    address_kind,
    target_problem,
    url_problem,
)

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
HTTPS_ONLY = "must be an https URL, such as https://example.com/webhooks."


class TestUrlForm:
    @pytest.mark.parametrize(
        "url",
        [
            "https://hooks.example.com/petrecords",
            "https://hooks.example.com:8443/a/b?c=d&e=f",
            "HTTPS://Hooks.Example.COM/",
            "https://hooks.example.com./",
            "https://bücher.example/",
            "https://my_hooks.example.com/",
            "https://8.8.8.8/hooks",
            "https://[2606:4700::1111]:443/hooks",
            "https://example.com/" + "x" * (MAX_URL_LENGTH - len("https://example.com/")),
        ],
    )
    def test_an_absolute_https_url_is_accepted(self, url: str) -> None:
        assert url_problem(url, allow_private=False) is None

    @pytest.mark.parametrize(
        ("url", "problem"),
        [
            (
                "https://example.com/" + "x" * (MAX_URL_LENGTH + 1 - len("https://example.com/")),
                "must be at most 2000 characters.",
            ),
            ("http://hooks.example.com/", "must use https: plain http is refused."),
            ("ftp://hooks.example.com/", HTTPS_ONLY),
            ("hooks.example.com/webhooks", HTTPS_ONLY),
            ("/webhooks", HTTPS_ONLY),
            ("//hooks.example.com/", HTTPS_ONLY),
            ("https:///webhooks", HTTPS_ONLY),
            ("https:hooks.example.com", HTTPS_ONLY),
            ("https://hooks example.com/", HTTPS_ONLY),
            ("https://hooks.example.com/a b", HTTPS_ONLY),
            ("https://hooks.example.com/\t", HTTPS_ONLY),
            ("https://hooks.example.com\\@other.example.com/", HTTPS_ONLY),
            ("https://user:password@hooks.example.com/", "must not contain user information (user:password@)."),
            ("https://user@hooks.example.com/", "must not contain user information (user:password@)."),
            ("https://@hooks.example.com/", "must not contain user information (user:password@)."),
            ("https://hooks.example.com/#", "must not have a fragment (#…)."),
            ("https://hooks.example.com/a#b", "must not have a fragment (#…)."),
            ("https://hooks.example.com:0/", "must have a port from 1 to 65535."),
            ("https://hooks.example.com:65536/", "must have a port from 1 to 65535."),
            ("https://127.1/", "must name its host by a domain name or an IP address."),
            ("https://2130706433/", "must name its host by a domain name or an IP address."),
            ("https://0x7f.1/", "must name its host by a domain name or an IP address."),
            ("https://-hooks.example.com/", "must name its host by a domain name or an IP address."),
            ("https://hooks..example.com/", "must name its host by a domain name or an IP address."),
            ("https://[fe80::1%25eth0]/", "must name its host by a domain name or an IP address."),
        ],
    )
    def test_anything_else_is_refused_with_what_was_expected(self, url: str, problem: str) -> None:
        assert url_problem(url, allow_private=False) == problem

    def test_plain_http_is_allowed_with_private_targets(self) -> None:
        assert url_problem("http://hooks.example.com/", allow_private=True) is None
        assert url_problem("http://127.0.0.1:8080/", allow_private=True) is None
        assert url_problem("ftp://hooks.example.com/", allow_private=True) == (
            "must be an https or http URL, such as https://example.com/webhooks."
        )
        assert url_problem("http://u:p@hooks.example.com/", allow_private=True) == (
            "must not contain user information (user:password@)."
        )


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


class TestAddresses:
    @pytest.mark.parametrize(
        ("address", "kind"),
        [
            ("0.0.0.0", "unspecified"),  # noqa: S104 - an address refused, not one bound
            ("0.1.2.3", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.9", "reserved"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.1", "documentation"),
            ("203.0.113.1", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("fc00::1", "private"),
            ("fd12:3456::1", "private"),
            ("fec0::1", "private"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001::1", "reserved"),
            ("::7f00:1", "reserved"),
            ("100::1", "reserved"),
            ("64:ff9b:1::1", "private"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "link-local"),
            ("2002:7f00:1::", "loopback"),
            ("2002:c0a8:101::1", "private"),
        ],
    )
    def test_a_non_public_address_is_refused_as_what_it_is(self, address: str, kind: str) -> None:
        assert address_kind(_address(address)) == kind

    @pytest.mark.parametrize(
        "address",
        ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "2001:4860:4860::8888", "64:ff9b::808:808"],
    )
    def test_a_public_address_is_accepted(self, address: str) -> None:
        assert address_kind(_address(address)) is None

    @given(st.ip_addresses(v=4))
    def test_an_ipv4_address_in_ipv6_is_judged_as_itself(self, address: ipaddress.IPv4Address) -> None:
        kind = address_kind(address)
        assert address_kind(ipaddress.IPv6Address(f"::ffff:{address}")) == kind
        assert address_kind(ipaddress.IPv6Address((0x64FF9B << 96) | int(address))) == kind
        assert address_kind(ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80))) == kind

    @given(st.ip_addresses())
    def test_what_the_standard_library_calls_non_public_is_refused(self, address: IPAddress) -> None:
        """Except addresses that carry an IPv4 one, judged as it (above), which the library calls private as a
        whole range (::ffff:0:0/96) or not at all (64:ff9b::/96, 2002::/16)."""
        if isinstance(address, ipaddress.IPv6Address):
            assume(not (address.ipv4_mapped or address.sixtofour or address in NAT64))
        if (
            address.is_private
            or address.is_loopback
            or address.is_link_local
            or address.is_multicast
            or address.is_unspecified
            or address.is_reserved
            or not address.is_global
        ):
            assert address_kind(address) is not None

    @given(st.ip_addresses(network="10.0.0.0/8") | st.ip_addresses(network="fc00::/7"))
    def test_every_address_of_a_private_network_is_refused(self, address: IPAddress) -> None:
        assert address_kind(address) == "private"


class Lookups:
    """A look-up of the tests' own: each name answers its addresses, the others do not resolve; each takes
    `seconds`, and waits for `gate` when one is given."""

    def __init__(
        self, answers: dict[str, Sequence[str]], *, seconds: float = 0.0, gate: threading.Event | None = None
    ) -> None:
        self._answers = answers
        self._seconds = seconds
        self._gate = gate
        self.asked: list[str] = []
        self.threads: set[str] = set()

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        self.threads.add(threading.current_thread().name)
        time.sleep(self._seconds)
        if self._gate is not None:
            self._gate.wait(10)
        if host not in self._answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self._answers[host]


@pytest.fixture
def resolver() -> Iterator[Resolver]:
    made = Resolver()
    yield made
    made.close()


class TestUrlBeingWritten:
    async def test_a_public_host_is_accepted(self) -> None:
        lookups = Lookups({"hooks.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"]})
        assert (
            await target_problem("https://hooks.example.com/", allow_private=False, resolver=Resolver(lookup=lookups))
            is None
        )
        assert lookups.asked == ["hooks.example.com"]

    @pytest.mark.parametrize(
        ("url", "problem"),
        [
            ("https://127.0.0.1/", "must name a public host: 127.0.0.1 is a loopback address."),
            ("https://[::1]:8443/", "must name a public host: ::1 is a loopback address."),
            (
                "https://169.254.169.254/latest/meta-data/",
                "must name a public host: 169.254.169.254 is a link-local address.",
            ),
            ("https://0.0.0.0/", "must name a public host: 0.0.0.0 is an unspecified address."),
            ("https://[::ffff:192.168.0.1]/", "must name a public host: ::ffff:192.168.0.1 is a private address."),
            ("https://224.0.0.251/", "must name a public host: 224.0.0.251 is a multicast address."),
        ],
    )
    async def test_an_address_that_is_not_public_is_refused(self, url: str, problem: str) -> None:
        lookups = Lookups({})
        assert await target_problem(url, allow_private=False, resolver=Resolver(lookup=lookups)) == problem
        assert lookups.asked == []  # an address is not looked up

    async def test_a_name_that_resolves_to_a_private_address_is_refused(self) -> None:
        lookups = Lookups({"intranet.example.com": ["10.0.0.7"], "mixed.example.com": ["93.184.215.14", "fd00::1"]})
        resolver = Resolver(lookup=lookups)
        assert await target_problem("https://intranet.example.com/", allow_private=False, resolver=resolver) == (
            "must name a public host: intranet.example.com resolves to a private address."
        )
        assert await target_problem("https://mixed.example.com/", allow_private=False, resolver=resolver) == (
            "must name a public host: mixed.example.com resolves to a private address."
        )

    async def test_localhost_is_refused_as_the_system_resolves_it(self, resolver: Resolver) -> None:
        problem = await target_problem("https://localhost:8443/", allow_private=False, resolver=resolver)
        assert problem == "must name a public host: localhost resolves to a loopback address."

    async def test_a_name_that_does_not_resolve_is_refused(self, resolver: Resolver) -> None:
        problem = await target_problem("https://nowhere.invalid/", allow_private=False, resolver=resolver)
        assert problem == "must name a host that resolves: nowhere.invalid does not resolve."

    async def test_a_slow_resolver_is_waited_for_a_short_time_only(self) -> None:
        resolver = Resolver(lookup=Lookups({"slow.example.com": ["93.184.215.14"]}, seconds=1.0))
        started = time.monotonic()
        problem = await target_problem("https://slow.example.com/", allow_private=False, resolver=resolver, within=0.2)
        assert problem == "must name a host that resolves: slow.example.com did not resolve within 0.2 s."
        assert time.monotonic() - started < 0.9

    async def test_with_private_targets_allowed_nothing_is_looked_up(self) -> None:
        lookups = Lookups({})
        resolver = Resolver(lookup=lookups)
        assert await target_problem("http://anything.internal:8080/", allow_private=True, resolver=resolver) is None
        assert await target_problem("http://127.0.0.1/", allow_private=True, resolver=resolver) is None
        assert lookups.asked == []
        assert await target_problem("https://u@h.example/", allow_private=True, resolver=resolver) == (
            "must not contain user information (user:password@)."
        )

    async def test_the_form_is_checked_before_anything_is_looked_up(self) -> None:
        lookups = Lookups({})
        problem = await target_problem(
            "http://hooks.example.com/", allow_private=False, resolver=Resolver(lookup=lookups)
        )
        assert problem == "must use https: plain http is refused."
        assert lookups.asked == []


class TestResolverThreads:
    async def test_look_ups_run_off_the_event_loop_and_off_the_default_executor(self) -> None:
        """Look-ups that hang hold the resolver's threads: neither the event loop nor the default executor (where
        the loop's own look-ups run, which the database drivers use) waits for them."""
        gate = threading.Event()
        lookups = Lookups({"hangs.example.com": ["93.184.215.14"]}, gate=gate)
        resolver = Resolver(lookup=lookups)
        try:
            hanging = [
                asyncio.create_task(resolver.addresses("hangs.example.com", 443, within=10.0))
                for _ in range(Resolver.THREADS + 2)
            ]
            await asyncio.sleep(0.1)
            started = time.monotonic()
            await asyncio.sleep(0.05)
            await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.01)
            assert time.monotonic() - started < 0.5
            assert not any(task.done() for task in hanging)
        finally:
            gate.set()
        assert [str(address) for addresses in await asyncio.gather(*hanging) for address in addresses] == [
            "93.184.215.14"
        ] * (Resolver.THREADS + 2)
        resolver.close()
        assert lookups.threads
        assert all(name.startswith("webhook-resolver") for name in lookups.threads)

    async def test_a_refusal_names_the_host_and_what_it_reaches(self) -> None:
        resolver = Resolver(lookup=Lookups({"metadata.example.com": ["169.254.169.254"]}))
        with pytest.raises(AddressRefused) as refused:
            await resolver.checked("metadata.example.com", 443, allow_private=False, within=1.0)
        assert refused.value.reason == "metadata.example.com resolves to a link-local address"
        assert await resolver.checked("metadata.example.com", 443, allow_private=True, within=1.0) == [
            ipaddress.ip_address("169.254.169.254")
        ]
