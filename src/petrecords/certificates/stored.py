"""Each certificate's public JSON, kept in the database beside it, so that a link's first read is its one lookup.

A kennel reads a link once: the process's own copies (recent.py) help the reader who comes back, not the first one,
who would otherwise pay for the facts being made (about 0.8 ms of processor for 50 doses). So the document is made
when the certificate is written (its create and each change, in the write's transaction), and again by the first
read that finds it missing or stale, which keeps what it made; `reads.LINK` reads it with the link, in the one
statement that finds the token's digest.

Whether it still holds is told by its vouch, kept with it: the vouch of the records it was made from (reads.Link
.vouch: the certificate's and the pet's revisions and the writes to the pet's doses and to the vaccines, counted by
the database's triggers, which every write that can change what a certificate shows moves, and a write to another
pet's doses does not) and the due-soon days it was made with. A write that changes the facts thus marks the document
stale without touching it, at the cost of a count: a vaccine renamed, used by thousands of pets, moves one row for
all of them. The document is served
only when the vouch read with it, in the same statement and so from the same state of the data, is the one it was
made from, and before its first state change (`good_until`): a stale one never is, whatever commits meanwhile.
It is derived data: an export leaves it out, and an import makes it again on each link's first read.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from petrecords.certificates.facts import DAY_MS, Row, build_facts
from petrecords.certificates.recent import Kept, kept, kept_json, next_state_change
from petrecords.store.base import Transaction
from petrecords.store.sql import SqlTransaction
from petrecords.tables import Text, metadata

certificate_documents = sa.Table(
    "certificate_documents",
    metadata,
    sa.Column("certificate_id", sa.Uuid(), primary_key=True),
    sa.Column("vouch", Text, nullable=False, comment="what the document was made from (certificates.kept)"),
    sa.Column("good_until", sa.BigInteger(), nullable=False, comment="epoch ms: its first state change"),
    sa.Column("document", sa.LargeBinary(), nullable=False, comment="the public JSON, asOf empty"),
)
pet_dose_writes = sa.Table(
    "pet_dose_writes",
    metadata,
    sa.Column("pet_id", sa.Uuid(), primary_key=True),
    sa.Column("writes", sa.BigInteger(), nullable=False, comment="inserts, changes and deletes of its doses"),
)
"""Moved by the database's triggers (migration 0030), whoever writes: a pet with no row has had none since."""
vaccine_writes = sa.Table(
    "vaccine_writes",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False, comment="1: the one row"),
    sa.Column("writes", sa.BigInteger(), nullable=False, comment="changes and deletes of any vaccine"),
)
"""Moved by the database's triggers (migration 0030) at each change of any vaccine."""


def _upsert(insert: Any) -> sa.Insert:
    statement = insert(certificate_documents).values(
        certificate_id=sa.bindparam("certificate_id", type_=sa.Uuid()),
        vouch=sa.bindparam("vouch", type_=sa.String()),
        good_until=sa.bindparam("good_until", type_=sa.BigInteger()),
        document=sa.bindparam("document", type_=sa.LargeBinary()),
    )
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[certificate_documents.c.certificate_id],
        set_={name: statement.excluded[name] for name in ("vouch", "good_until", "document")},
    )
    return upsert


_UPSERTS = {"sqlite": _upsert(sqlite.insert), "postgresql": _upsert(postgresql.insert)}
_FORGET = sa.delete(certificate_documents).where(
    certificate_documents.c.certificate_id == sa.bindparam("certificate_id", type_=sa.Uuid())
)


def vouch_text(vouch: Sequence[Any], due_soon_days: int) -> str:
    """What a document is kept with: the vouch of its records (reads.Link.vouch), and the due-soon days its states
    were chosen with."""
    return ":".join(map(str, (due_soon_days, *vouch)))


def made(
    *,
    version: Sequence[Any],
    certificate_id: uuid.UUID,
    issued_at_ms: int,
    expires_at_ms: int,
    groups: Collection[str] | None,
    pet: Row,
    doses: Sequence[tuple[Row, Row]],
    now_ms: int,
    due_soon_days: int,
) -> Kept:
    """A certificate's facts as of `now_ms`, kept until their first state change or the link's expiry."""
    facts = build_facts(
        certificate_id=certificate_id,
        issued_at_ms=issued_at_ms,
        expires_at_ms=expires_at_ms,
        groups=groups,
        pet=pet,
        doses=doses,
        now_ms=now_ms,
        due_soon_days=due_soon_days,
    )
    change = next_state_change((dose["due_at"] for dose, _ in doses), now_ms=now_ms, due_soon_ms=due_soon_days * DAY_MS)
    good_until = expires_at_ms if change is None else min(change, expires_at_ms)
    return kept(tuple(version), facts, good_until_ms=good_until)


def stored_answer(version: Sequence[Any], stored: Sequence[Any], *, due_soon_days: int, now_ms: int) -> Kept | None:
    """The document read with a link (its vouch, `good_until` and bytes), when it holds for the link's `version`
    (its vouch as read in the same statement) now; None when it is missing or stale."""
    vouch, good_until, document = stored
    if vouch is None or vouch != vouch_text(version, due_soon_days) or now_ms >= good_until:
        return None
    return kept_json(tuple(version), bytes(document), good_until_ms=good_until)


async def keep_document(
    tx: Transaction, certificate_id: uuid.UUID, version: Sequence[Any], answer: Kept, *, due_soon_days: int
) -> None:
    """Keep a certificate's document, made at `version` (its vouch), over the one kept before: in a write
    transaction."""
    sql = _statements(tx)
    values = {
        "certificate_id": certificate_id,
        "vouch": vouch_text(version, due_soon_days),
        "good_until": answer.good_until_ms,
        "document": answer.head + answer.tail,
    }
    await sql.execute(_UPSERTS[sql.dialect_name], values)


async def forget_document(tx: Transaction, certificate_id: uuid.UUID) -> None:
    """Drop a deleted certificate's document, in the deletion's transaction."""
    await _statements(tx).execute(_FORGET, {"certificate_id": certificate_id})


def _statements(tx: Transaction) -> SqlTransaction:
    if not isinstance(tx, SqlTransaction):
        raise TypeError(f"{type(tx).__name__} runs no statements")
    return tx
