"""Match and sort names in Unicode normalization form C: recompute the kept name keys.

Revision ID: e5b8f2a4c7d1
Revises: d9a7c3e5b1f4
Create Date: 2026-11-24
"""

import unicodedata
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e5b8f2a4c7d1"
down_revision: str | None = "d9a7c3e5b1f4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 5000
_pets = sa.table("pets", sa.column("id", sa.Uuid()), sa.column("name", sa.String()), sa.column("name_key", sa.String()))


def _fold(text: str) -> str:
    return "".join(lowered if len(lowered := char.lower()) == 1 else char for char in text)


def _nfc_key(name: str) -> str:
    # The key as the service computes it from this revision on (petrecords.text.match_key), written out here
    # so that the migration keeps meaning what it meant when the service's code moves on.
    return name.lower() if name.isascii() else _fold(unicodedata.normalize("NFC", name))


def _recompute(key: Callable[[str], str]) -> None:
    """Rewrite every name key that `key` computes differently, a batch at a time in id order."""
    connection = op.get_bind()
    last = None
    while True:
        query = sa.select(_pets.c.id, _pets.c.name, _pets.c.name_key).order_by(_pets.c.id).limit(_BATCH)
        if last is not None:
            query = query.where(_pets.c.id > last)
        rows = connection.execute(query).all()
        if not rows:
            return
        changed = [{"pet_id": pet_id, "key": key(name)} for pet_id, name, stored in rows if key(name) != stored]
        if changed:
            connection.execute(
                _pets.update().where(_pets.c.id == sa.bindparam("pet_id")).values(name_key=sa.bindparam("key")),
                changed,
            )
        last = rows[-1][0]


def upgrade() -> None:
    _recompute(_nfc_key)


def downgrade() -> None:
    _recompute(_fold)
