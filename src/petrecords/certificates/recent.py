"""The facts of the links answered lately, kept by each process for as long as they cannot have changed.

What a certificate shows depends on its record, its pet, the pet's doses and their vaccines, and on the time of the
answer: `asOf`, and the state of each group's latest dose. A kept answer is vouched for by what it was made from
(reads.Link.vouch: the certificate's and the pet's revisions and the writes counted to the pet's doses and to the
vaccines, read in the statement that finds the link, before the rows the facts are made from), and by the moment of
its first state change or of the link's expiry, whichever comes first. Asked again while both hold, a link costs that
one statement and no other: a revocation, a new expiry or groups, a dose added, deleted or marked in error, a vaccine
renamed, the pet changing hands, each moves the vouch and is shown at once; a write to another pet moves nothing.
Where the store tells without a statement that nothing at all was written since the vouch last held (SQLite), not
even the vouch is read.

Only a live link that was just read is kept, by its token's digest: a token of no link never reaches this
table, so it cannot be filled with guesses. The JSON is kept as the bytes around `asOf`, which each answer fills
with its own time.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Iterable

import msgspec

from petrecords.certificates.facts import CertificateFacts, encode_facts

KEPT_BYTES = 16 * 1024 * 1024
"""The JSON a process keeps, at most, over every link it keeps."""
_AS_OF = b'"asOf":"'
_decoder = msgspec.json.Decoder(CertificateFacts)


class Kept(msgspec.Struct, frozen=True):
    version: Hashable
    """What vouched for the facts when they were made (reads.Link.vouch)."""
    facts: CertificateFacts | None
    """None for a document read as stored (stored.py): read from its JSON when a form needs them."""
    good_until_ms: int
    """The link's expiry, or the first moment a dose's state changes, whichever comes first."""
    head: bytes
    """The JSON up to and including `"asOf":"`."""
    tail: bytes
    """The JSON from the quote that closes `asOf`."""

    def facts_as_of(self, as_of: str) -> CertificateFacts:
        if self.facts is None:
            return _decoder.decode(self.json_as_of(as_of))
        return msgspec.structs.replace(self.facts, as_of=as_of)

    def json_as_of(self, as_of: str) -> bytes:
        """Exactly `encode_facts(self.facts_as_of(as_of))`, without encoding the facts again."""
        return b"".join((self.head, as_of.encode("ascii"), self.tail))

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)


def kept(version: Hashable, facts: CertificateFacts, *, good_until_ms: int) -> Kept:
    encoded = encode_facts(msgspec.structs.replace(facts, as_of=""))
    return _split(version, facts, encoded, good_until_ms)


def kept_json(version: Hashable, encoded: bytes, *, good_until_ms: int) -> Kept:
    """The answer of a document as `kept` encoded it, `asOf` empty (a document read as stored)."""
    return _split(version, None, encoded, good_until_ms)


def _split(version: Hashable, facts: CertificateFacts | None, encoded: bytes, good_until_ms: int) -> Kept:
    # `asOf` follows the certificate's id and two instants, in which the marker cannot occur.
    split = encoded.index(_AS_OF) + len(_AS_OF)
    return Kept(version=version, facts=facts, good_until_ms=good_until_ms, head=encoded[:split], tail=encoded[split:])


def next_state_change(due_at_ms: Iterable[int], *, now_ms: int, due_soon_ms: int) -> int | None:
    """The first moment after `now_ms` at which a dose due at one of `due_at_ms` turns due-soon or overdue (see
    facts.due_state): the facts made now hold until then. None when none will."""
    later = [moment for due_at in due_at_ms for moment in (due_at - due_soon_ms, due_at) if moment > now_ms]
    return min(later, default=None)


class RecentCertificates:
    """The kept answers of one process, by their token's digest, the least recently asked for dropped first.

    Beside each, the store's unread data version (Store.unread_data_version, where it has one: SQLite's) read just
    before its vouch was last found to hold: while that version has not moved, nothing was written since, and the
    answer holds without the vouch being read again (no statement at all)."""

    def __init__(self, most_bytes: int = KEPT_BYTES) -> None:
        self._most_bytes = most_bytes
        self._bytes = 0
        self._kept: collections.OrderedDict[str, Kept] = collections.OrderedDict()
        self._confirmed: dict[str, Hashable] = {}

    def __contains__(self, digest: str) -> bool:
        return digest in self._kept

    def unchanged(self, digest: str, *, data_version: Hashable, now_ms: int) -> Kept | None:
        """The answer kept for a link, when nothing was written since its vouch last held, and now before its end."""
        found = self._kept.get(digest)
        if found is None or self._confirmed.get(digest) != data_version or now_ms >= found.good_until_ms:
            return None
        self._kept.move_to_end(digest)
        return found

    def get(self, digest: str, *, version: Hashable, now_ms: int, data_version: Hashable | None = None) -> Kept | None:
        """The answer kept for a link, when it still holds: made at this version (its vouch), and now before its
        end. `data_version`: the store's unread data version, read before the vouch was."""
        found = self._kept.get(digest)
        if found is None:
            return None
        if found.version != version or now_ms >= found.good_until_ms:
            self.forget(digest)
            return None
        self._kept.move_to_end(digest)
        self._confirm(digest, data_version)
        return found

    def keep(self, digest: str, answer: Kept, *, data_version: Hashable | None = None) -> None:
        self.forget(digest)
        if answer.size > self._most_bytes:
            return
        self._kept[digest] = answer
        self._confirm(digest, data_version)
        self._bytes += answer.size
        while self._bytes > self._most_bytes:
            dropped_digest, dropped = self._kept.popitem(last=False)
            self._confirmed.pop(dropped_digest, None)
            self._bytes -= dropped.size

    def forget(self, digest: str) -> None:
        dropped = self._kept.pop(digest, None)
        self._confirmed.pop(digest, None)
        if dropped is not None:
            self._bytes -= dropped.size

    def _confirm(self, digest: str, data_version: Hashable | None) -> None:
        if data_version is None:
            self._confirmed.pop(digest, None)
        else:
            self._confirmed[digest] = data_version
