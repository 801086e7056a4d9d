"""The public paths' rate limit per client address (petrecords.certificates.addresses): whose address a request
is, with or behind trusted proxies, and a limit whose memory a flood of made-up addresses cannot grow."""

from __future__ import annotations

import ipaddress
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from petrecords import ratelimit
from petrecords.certificates.addresses import TrustedProxies, create_public_rate_limit, parse_address
from petrecords.config import Settings
from petrecords.ratelimit import LocalRateLimiter

PROXIES = TrustedProxies(["10.0.0.0/8", "192.0.2.7", "2001:db8:1::/48"])


class TestClientAddress:
    def test_the_peer_when_it_is_no_proxy(self) -> None:
        assert PROXIES.client_of("203.0.113.5", ["198.51.100.1"]) == "203.0.113.5"
        assert TrustedProxies([]).client_of("10.1.1.1", ["198.51.100.1"]) == "10.1.1.1"

    def test_the_right_most_entry_that_is_no_proxy(self) -> None:
        assert PROXIES.client_of("10.0.0.1", ["198.51.100.9, 203.0.113.5, 10.2.2.2"]) == "203.0.113.5"
        assert PROXIES.client_of("10.0.0.1", ["198.51.100.9", "203.0.113.5, 192.0.2.7"]) == "203.0.113.5"

    def test_every_entry_a_proxy_is_the_left_most(self) -> None:
        assert PROXIES.client_of("10.0.0.1", ["10.9.9.9, 192.0.2.7"]) == "10.9.9.9"
        assert PROXIES.client_of("10.0.0.1", []) == "10.0.0.1"

    def test_a_malformed_entry_counts_against_the_proxy_that_wrote_it(self) -> None:
        assert PROXIES.client_of("10.0.0.1", ["198.51.100.9, unknown"]) == "10.0.0.1"
        assert PROXIES.client_of("10.0.0.1", ["garbage, 10.3.3.3"]) == "10.3.3.3"
        assert PROXIES.client_of("10.0.0.1", [", 10.3.3.3"]) == "10.3.3.3"

    def test_ports_brackets_and_mapped_addresses(self) -> None:
        assert parse_address("192.0.2.1:4711") == ipaddress.ip_address("192.0.2.1")
        assert parse_address("[2001:db8::1]:443") == ipaddress.ip_address("2001:db8::1")
        assert parse_address("::ffff:192.0.2.1") == ipaddress.ip_address("192.0.2.1")
        assert parse_address("fe80::1%eth0") is None
        assert parse_address("[2001:db8::1]x") is None
        assert parse_address("192.0.2.1:http") is None

    def test_an_ipv6_client_counts_with_its_64(self) -> None:
        assert PROXIES.client_of("2001:db8:9:9:1::1", []) == "2001:db8:9:9::/64"
        assert PROXIES.client_of("2001:db8:1::5", ["2001:db8:9:9:ffff::1"]) == "2001:db8:9:9::/64"

    def test_a_peer_that_is_no_address_is_one_client(self) -> None:
        assert PROXIES.client_of(None, ["203.0.113.5"]) == "unknown"


_ipv4 = st.ip_addresses(v=4).map(str)
_proxy = st.builds(lambda host: f"10.{host >> 16 & 255}.{host >> 8 & 255}.{host & 255}", st.integers(0, 2**24 - 1))
_entry = st.one_of(_ipv4, _proxy, st.sampled_from(["unknown", "", "not an address", "_hidden"]))


class TestForwardedForProperties:
    @given(
        client=_ipv4.filter(lambda text: not text.startswith("10.")),
        forged=st.lists(_entry, max_size=5),
        proxies=st.lists(_proxy, max_size=4),
    )
    def test_what_a_client_puts_in_front_never_changes_its_address(
        self, client: str, forged: list[str], proxies: list[str]
    ) -> None:
        # Each trusted proxy appends its peer's address: the client's first, then the proxies before the last.
        chain = [*forged, client, *proxies]
        assert PROXIES.client_of("10.0.0.1", [", ".join(chain)]) == client

    @given(peer=_ipv4, entries=st.lists(_entry, max_size=6))
    def test_the_result_is_the_peer_or_an_entry(self, peer: str, entries: list[str]) -> None:
        found = PROXIES.client_of(peer, [", ".join(entries)])
        assert found == peer or found in {entry.strip() for entry in entries}

    @given(peer=_ipv4.filter(lambda text: not text.startswith("10.")), entries=st.lists(_entry, max_size=6))
    def test_from_no_proxy_the_header_is_ignored(self, peer: str, entries: list[str]) -> None:
        assert PROXIES.client_of(peer, [", ".join(entries)]) == peer


class TestPublicRateLimit:
    async def test_per_address_per_minute(self) -> None:
        limit = create_public_rate_limit(per_minute=3, redis_url=None)
        assert limit is not None
        assert [await limit.hit("203.0.113.5") for _ in range(3)] == [None, None, None]
        assert (await limit.hit("203.0.113.5") or 0) >= 1
        assert await limit.hit("203.0.113.6") is None

    def test_zero_turns_it_off(self) -> None:
        assert create_public_rate_limit(per_minute=0, redis_url=None) is None

    async def test_a_flood_of_addresses_keeps_memory_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        now = [10**12]
        monkeypatch.setattr(ratelimit, "time", types.SimpleNamespace(monotonic_ns=lambda: now[0]))
        limiter = LocalRateLimiter(1, max_entries=1000)  # each address's budget is spent for a whole minute
        for number in range(20_000):
            await limiter.hit(f"198.51.{number >> 8 & 255}.{number & 255}-{number}")
            assert len(limiter) <= 1000
        assert len(limiter) >= 750


class TestTheSetting:
    def test_addresses_and_ranges_comma_separated(self) -> None:
        settings = Settings(trusted_proxies="10.0.0.0/8, 192.0.2.7,2001:db8::/32", _env_file=None)  # type: ignore[arg-type,call-arg]
        assert settings.trusted_proxies == ("10.0.0.0/8", "192.0.2.7", "2001:db8::/32")

    @pytest.mark.parametrize("value", ["10.0.0.1/8", "proxy.example", "10.0.0.0/33"])
    def test_anything_else_is_refused_at_start(self, value: str) -> None:
        with pytest.raises(ValidationError, match="is not an address or a CIDR range"):
            Settings(trusted_proxies=value, _env_file=None)  # type: ignore[arg-type,call-arg]
