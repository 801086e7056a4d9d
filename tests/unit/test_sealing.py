"""Sealed secrets of kept answers (sealing.py): they open with the key and context they were sealed with, and
with nothing else; a kept answer's record stays readable whatever happens to its seal."""

from __future__ import annotations

from petrecords.sealing import Sealer, kept_parts


def test_a_seal_opens_only_with_its_key_and_context() -> None:
    sealer = Sealer(b"the signing key's bytes")
    sealed = sealer.seal(b'{"link":"/public/certificates/x"}', context=b'["alice@example.com","key-1"]')

    assert b"/public/certificates/x" not in sealed
    assert sealer.open(sealed, context=b'["alice@example.com","key-1"]') == b'{"link":"/public/certificates/x"}'
    assert sealer.open(sealed, context=b'["alice@example.com","key-2"]') is None
    assert Sealer(b"another key").open(sealed, context=b'["alice@example.com","key-1"]') is None
    assert sealer.open(sealed[:-1], context=b'["alice@example.com","key-1"]') is None
    assert sealer.open(b"", context=b"") is None


def test_a_kept_answer_is_its_record_and_its_seal() -> None:
    sealer = Sealer(b"k")
    kept = sealer.keep(b'{"id":"1"}', b'{"secret":"s"}', context=b"c")

    record, sealed = kept_parts(kept)
    assert record == b'{"id":"1"}'
    assert sealed is not None
    assert sealer.open(sealed, context=b"c") == b'{"secret":"s"}'
    assert kept_parts(b'{"id":"1","link":"kept before seals"}') == (b'{"id":"1","link":"kept before seals"}', None)
