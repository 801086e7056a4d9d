"""What each part of a SQL transaction (store/sql.py) runs its statements with, and the state they share."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.store.records import Statement
from petrecords.store.turns import LongReadTurns, Turn


class Runner(abc.ABC):
    """The dialect's hooks that every part of SqlTransaction runs on: `fetch` and `execute` (a store's subclass
    says how), and the state of the transaction they share."""

    write: bool
    begun: bool
    long_read_turns: LongReadTurns | None
    _turn: Turn | None

    def __init__(self) -> None:  # noqa: B027 - not abstract: it ends the chain on purpose
        """The end of the parts' chain of __init__: the protocols after it in the order of bases (base.py) set
        nothing, and a transaction is made for every request."""

    @abc.abstractmethod
    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of a query, as sequences of column values."""

    @abc.abstractmethod
    async def execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Run a statement that returns no rows, once (with the given parameters), or once per row of them; where
        the store defers writes, with the transaction's next read or its commit."""
