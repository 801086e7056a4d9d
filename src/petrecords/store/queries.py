"""List and count statements: the conditions of a list (narrowed by a trigram index for substring search),
its sort, a page, and how many records match."""

from __future__ import annotations

import enum
import functools
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import (
    Collection,
    Condition,
    Operator,
    PageQuery,
    SharedBy,
    SortKey,
)
from petrecords.store.counts import (
    before_values,
    kept_count_scope,
    kept_count_select,
    period_count_select,
    scope_values,
)
from petrecords.store.grants import unexpired
from petrecords.store.pages import SortKeyValues
from petrecords.store.records import Statement, reader_of
from petrecords.tables import (
    ALL_OWNERS,
    search_table_name,
)

Shape = tuple[tuple[tuple[str, ...], Operator, int, bool], ...]
"""What a list's conditions look like, without their values: which columns, which operator, how many values,
and whether a trigram index could give the candidates (one LIKE pattern with a literal run of three or more
characters)."""

SHARED_OPERATORS = (Operator.SHARED, Operator.SHARED_EACH, Operator.OWNED_OR_SHARED, Operator.OWNED_OR_SHARED_EACH)

TRIGRAM = 3
"""The characters of a trigram: the shortest literal run of a pattern that a trigram index can look up."""


def trigram_runs(pattern: str) -> list[str]:
    """The literal runs of a LIKE pattern (escape `\\`) that are long enough to look up by their trigrams:
    the text between wildcards, with its escapes resolved. A value that matches holds each of them."""
    runs, current, index = [], [], 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            current.append(pattern[index + 1])
            index += 2
            continue
        if char in "%_":
            runs.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    runs.append("".join(current))
    return [run for run in runs if len(run) >= TRIGRAM]


def fts5_query(pattern: str) -> str:
    """An FTS5 query for the rows that hold every trigram run of `pattern`: one quoted phrase per run (the
    trigram tokenizer reads a phrase as a substring), so that nothing in the text is read as query syntax."""
    return " AND ".join('"' + run.replace('"', '""') + '"' for run in trigram_runs(pattern))


def _by_trigrams(condition: Condition) -> bool:
    return (
        condition.operator is Operator.LIKE and len(condition.values) == 1 and bool(trigram_runs(condition.values[0]))
    )


def shape_of(conditions: tuple[Condition, ...]) -> Shape:
    return tuple(
        (condition.columns, condition.operator, len(condition.values), _by_trigrams(condition))
        for condition in conditions
    )


def condition_values(conditions: tuple[Condition, ...]) -> dict[str, Any]:
    return {
        f"c{index}_{position}": value
        for index, condition in enumerate(conditions)
        for position, value in enumerate(condition.values)
    }


class TrigramSearch(enum.Enum):
    """How a database reads the candidates of a substring pattern over a collection's searchable columns from
    their trigram index: first, whatever the planner estimates the pattern's matches to be (PostgreSQL's
    generic plan takes a pattern to match 0.5 % of the rows, and would rather walk the page's order and filter,
    which reads every row of a caller's when few match), then only those records, where the other conditions
    and the pattern itself are checked."""

    GIN = "gin"
    """PostgreSQL: the tuple ids of the pattern's matches from the GIN (pg_trgm) indexes, gathered once (an
    InitPlan), then read by tuple id, in the statement's own snapshot."""
    FTS5 = "fts5"
    """SQLite: the matches of the collection's FTS5 trigram table, joined to the records by rowid."""


def trigram_pattern(collection: Collection, conditions: tuple[Condition, ...]) -> int | None:
    """The position of the condition whose candidates a trigram index would give (see `_narrowed_source`)."""
    if collection.searchable:
        for index, condition in enumerate(conditions):
            if condition.columns == collection.searchable and _by_trigrams(condition):
                return index
    return None


def unindexed_patterns(collection: Collection, conditions: tuple[Condition, ...]) -> tuple[int, ...]:
    """The positions of the substring patterns that no trigram index serves (too short to hold a trigram, or
    over columns that have none): each is checked on every record the other conditions let through."""
    return tuple(
        index
        for index, condition in enumerate(conditions)
        if condition.operator is Operator.LIKE
        and not (condition.columns == collection.searchable and _by_trigrams(condition))
    )


def checked_by_unindexed_patterns(collection: Collection, conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
    """The conditions but the patterns no trigram index serves: they select the records those patterns are checked
    on, one by one (all of `conditions` where there is no such pattern)."""
    unindexed = unindexed_patterns(collection, conditions)
    return tuple(condition for index, condition in enumerate(conditions) if index not in unindexed)


def _trigram_values(
    collection: Collection, conditions: tuple[Condition, ...], search: TrigramSearch | None
) -> dict[str, Any]:
    """The value of the FTS5 query that `_narrowed_source` adds, if it adds one."""
    index = trigram_pattern(collection, conditions) if search is TrigramSearch.FTS5 else None
    return {} if index is None else {f"c{index}_trigrams": fts5_query(conditions[index].values[0])}


def _narrowed_source(
    collection: Collection, shape: Shape, source: sa.FromClause, search: TrigramSearch | None
) -> tuple[sa.FromClause, list[sa.ColumnElement[bool]]]:
    """The FROM of a list or count, and the conditions it adds, with the trigram index that serves its first
    pattern over the collection's searchable columns (the pattern's own condition still decides)."""
    if search is None or not collection.searchable:
        return source, []
    table = collection.table
    for index, (columns, operator, count, by_trigrams) in enumerate(shape):
        if not by_trigrams or columns != collection.searchable:
            continue
        if search is TrigramSearch.GIN:
            candidates = table.alias("candidates")
            matching = _condition(candidates, None, index, columns, operator, count, by_trigrams)
            tuple_ids: sa.Select[Any] = (
                sa.select(sa.literal_column("candidates.ctid")).select_from(candidates).where(matching)
            )
            tuple_id: sa.ColumnElement[Any] = sa.literal_column(f"{table.name}.ctid")
            return source, [tuple_id == sa.func.any(sa.func.array(tuple_ids.scalar_subquery()))]
        name = search_table_name(table.name)
        index_table = sa.table(name, sa.column("rowid", sa.Integer()))
        rowid = sa.literal_column(f"{table.name}.rowid", sa.Integer())
        match = sa.literal_column(name).op("MATCH", is_comparison=True)(sa.bindparam(f"c{index}_trigrams"))
        return sa.join(index_table, source, rowid == index_table.c.rowid), [match]
    return source, []


def _condition(
    table: sa.FromClause,
    shared_by: SharedBy | None,
    index: int,
    columns: tuple[str, ...],
    operator: Operator,
    count: int,
    _by_trigrams: bool,
) -> sa.ColumnElement[bool]:
    def value(position: int, column: str) -> sa.BindParameter[Any]:
        column_type = table.c[column].type
        if isinstance(column_type, sa.Integer) and not isinstance(column_type, sa.BigInteger):
            # A filter's bound may be any safe integer, beyond the 32 bits of such a column on PostgreSQL, whose
            # driver refuses to send it as one; compared as 64 bits, it simply matches or not.
            column_type = sa.BigInteger()
        return sa.bindparam(f"c{index}_{position}", type_=column_type)

    first = table.c[columns[0]]
    if operator is Operator.NEVER:
        return sa.false()
    if operator is Operator.IN:
        return first.in_([value(position, columns[0]) for position in range(count)])
    if operator is Operator.LIKE:
        return sa.and_(
            *(
                sa.or_(*(table.c[column].like(value(position, column), escape="\\") for column in columns))
                for position in range(count)
            )
        )
    if operator is Operator.OWNED_OR_NAMED:
        named = table.c[columns[1]].in_([value(position, columns[1]) for position in range(count)])
        return sa.or_(_one_of(first, [value(position, columns[0]) for position in range(count)]), named)
    if operator in SHARED_OPERATORS:
        if shared_by is None:
            raise TypeError(f"the records of {table} are not shared")
        owned = operator in (Operator.OWNED_OR_SHARED, Operator.OWNED_OR_SHARED_EACH)
        key = table.c[columns[-1]]
        shared = _shared_keys(shared_by, index, first_value=1, count=count)
        granted: sa.ColumnElement[bool]
        if operator in (Operator.SHARED_EACH, Operator.OWNED_OR_SHARED_EACH):
            # OFFSET 0: PostgreSQL would otherwise gather every share of the grantees into a hash first (a
            # "hashed SubPlan": 95,000 shares, 50-70 ms, for a page that looks up fifty), which it costs without
            # the page's LIMIT. A subquery with an OFFSET is kept as it is written: looked up for each record.
            each = shared.where(shared_by.table.c[shared_by.target_column] == key).suffix_with(
                "OFFSET 0", dialect="postgresql"
            )
            granted = sa.exists(each)
        else:
            granted = key.in_(shared)
        if not owned:
            return granted
        return sa.or_(_one_of(first, [value(position, columns[0]) for position in range(1, count)]), granted)
    if operator is Operator.DIFFERS and count > 1:
        return sa.and_(*(first.is_distinct_from(value(position, columns[0])) for position in range(count)))
    bound = value(0, columns[0])
    comparisons = {
        Operator.EQUAL: first == bound,
        Operator.AT_LEAST: first >= bound,
        Operator.BELOW: first < bound,
        Operator.AT_MOST: first <= bound,
        Operator.DIFFERS: first.is_distinct_from(bound),
        Operator.AFTER_OR_NULL: sa.or_(first.is_(None), first > bound),
    }
    return comparisons[operator]


def _one_of(column: sa.ColumnElement[Any], values: list[sa.BindParameter[Any]]) -> sa.ColumnElement[bool]:
    """The column holds one of the values: an equality for one (a caller in no group), as it was written before
    callers had groups, so that their statements and plans stay as they were."""
    return column == values[0] if len(values) == 1 else column.in_(values)


def _shared_keys(shared_by: SharedBy, index: int, *, first_value: int, count: int) -> sa.Select[Any]:
    """The keys of the records shared, now (the condition's value just before `first_value`), with one of the
    grantees (its values from `first_value` on)."""
    shares = shared_by.table
    now = sa.bindparam(f"c{index}_{first_value - 1}", type_=sa.BigInteger())
    grantees = [
        sa.bindparam(f"c{index}_{position}", type_=shares.c[shared_by.grantee_column].type)
        for position in range(first_value, count)
    ]
    return sa.select(shares.c[shared_by.target_column]).where(
        shares.c[shared_by.grantee_column].in_(grantees), unexpired(shares.c[shared_by.expires_column], now)
    )


def _conditions(collection: Collection, table: sa.Table, shape: Shape) -> list[sa.ColumnElement[bool]]:
    return [_condition(table, collection.shared_by, index, *parts) for index, parts in enumerate(shape)]


def _sort_expressions(table: sa.Table, key: SortKey) -> list[sa.ColumnElement[Any]]:
    column = table.c[key.column]
    if key.nullable:
        # Nulls last (first, descending) on both databases, whose own defaults differ.
        return [column.is_(None), *_sort_expressions(table, SortKey(key.column, key.descending, key.rank))]
    if key.rank is None:
        return [column]
    # SQL lower() folds only ASCII on both databases; ranked values are ordered in Python instead.
    rank = sa.case({value: index for index, value in enumerate(key.rank)}, value=column)
    return [sa.func.coalesce(rank, len(key.rank)), sa.func.lower(column)]


def _sort_columns(table: sa.Table, sort: tuple[SortKey, ...]) -> tuple[list[sa.ColumnElement[Any]], list[bool]]:
    """The expressions a list is ordered by, and whether each is descending."""
    expressions, directions = [], []
    for key in sort:
        for expression in _sort_expressions(table, key):
            expressions.append(expression)
            directions.append(key.descending)
    return expressions, directions


@functools.lru_cache(maxsize=1024)
def _list_select(
    collection: Collection,
    shape: Shape,
    sort: tuple[SortKey, ...],
    *,
    keys_only: bool,
    after: bool,
    search: TrigramSearch | None,
) -> sa.Select[Any]:
    table = collection.table
    reader = reader_of(collection)
    expressions, directions = _sort_columns(table, sort)
    source, conditions = _narrowed_source(collection, shape, table if keys_only else reader.from_clause, search)
    conditions.extend(_conditions(collection, table, shape))
    if after:
        # Rows after a sort key: one row-value comparison, which an index on the sort columns serves.
        row = sa.tuple_(*expressions)
        key = sa.tuple_(*(sa.bindparam(f"after_{index}", type_=e.type) for index, e in enumerate(expressions)))
        conditions.append(row < key if directions[0] else row > key)
    return (
        sa.select(*(expressions if keys_only else reader.columns))
        .select_from(source)
        .where(*conditions)
        .order_by(*(e.desc() if d else e.asc() for e, d in zip(expressions, directions, strict=True)))
        .limit(sa.bindparam("limit"))
        .offset(sa.bindparam("offset"))
    )


def list_statement(
    collection: Collection,
    query: PageQuery,
    *,
    keys_only: bool = False,
    after_key: SortKeyValues | None = None,
    search: TrigramSearch | None = None,
) -> Statement:
    """The page's rows (or only their sort keys); with `after_key`, only rows after that sort key."""
    statement = _list_select(
        collection,
        shape_of(query.conditions),
        query.sort,
        keys_only=keys_only,
        after=after_key is not None,
        search=search,
    )
    values = condition_values(query.conditions) | _trigram_values(collection, query.conditions, search)
    values["limit"], values["offset"] = query.limit, query.offset
    values.update({f"after_{index}": value for index, value in enumerate(after_key or ())})
    return statement, values


def sort_directions(collection: Collection, query: PageQuery) -> list[bool]:
    return _sort_columns(collection.table, query.sort)[1]


def _matching(collection: Collection, shape: Shape, search: TrigramSearch | None) -> sa.Select[Any]:
    """The records that match, as a select of nothing yet: what a count counts."""
    source, conditions = _narrowed_source(collection, shape, collection.table, search)
    conditions.extend(_conditions(collection, collection.table, shape))
    return sa.select().select_from(source).where(*conditions)


@functools.lru_cache(maxsize=256)
def _counted_select(collection: Collection, shape: Shape, search: TrigramSearch | None) -> sa.Select[Any]:
    return _matching(collection, shape, search).add_columns(sa.func.count())


@functools.lru_cache(maxsize=256)
def _matching_rows_select(collection: Collection, shape: Shape, search: TrigramSearch | None) -> sa.Select[Any]:
    return _matching(collection, shape, search).add_columns(sa.literal(1))


@functools.lru_cache(maxsize=256)
def _bounded_count_select(collection: Collection, shape: Shape, search: TrigramSearch | None) -> sa.Select[Any]:
    matching = _matching_rows_select(collection, shape, search).limit(sa.bindparam("bound"))
    return sa.select(sa.func.count()).select_from(matching.subquery())


def matching_rows_statement(
    collection: Collection, conditions: tuple[Condition, ...], *, search: TrigramSearch | None = None
) -> Statement:
    """A row of one constant for each record that matches: what `count_statement` counts when no kept count
    serves, for a count that moves over them a slice at a time."""
    values = condition_values(conditions) | _trigram_values(collection, conditions, search)
    return _matching_rows_select(collection, shape_of(conditions), search), values


def bounded_count_statement(
    collection: Collection, conditions: tuple[Condition, ...], bound: int, *, search: TrigramSearch | None = None
) -> Statement:
    """How many records match, counted up to `bound` (which is what it answers when at least that many do): a
    count whose cost is at most `bound` rows read, from the kept counts when the conditions allow."""
    if kept_count_scope(collection, conditions) is not None:
        return count_statement(collection, conditions)
    values = condition_values(conditions) | _trigram_values(collection, conditions, search)
    values["bound"] = bound
    return _bounded_count_select(collection, shape_of(conditions), search), values


def count_statement(
    collection: Collection, conditions: tuple[Condition, ...], *, search: TrigramSearch | None = None
) -> Statement:
    """The number of records that match: from the kept counts when the conditions allow, else counted."""
    kept = kept_count_scope(collection, conditions)
    if kept is None:
        counted = condition_values(conditions) | _trigram_values(collection, conditions, search)
        return _counted_select(collection, shape_of(conditions), search), counted
    values: dict[str, Any] = {"resource": collection.name, **scope_values(kept.scopes)}
    scopes = len(kept.scopes)
    if kept.below is not None or kept.at_least is not None:
        for bound, instant in (("below", kept.below), ("at_least", kept.at_least)):
            if instant is not None:
                values.update(before_values(bound, instant))
        owned = kept.scopes != (ALL_OWNERS,)
        select = period_count_select(
            collection, below=kept.below is not None, at_least=kept.at_least is not None, owned=owned, scopes=scopes
        )
        return select, values
    partitions = kept.partitions
    if partitions is not None:
        values.update({f"partition_{i}": value for i, value in enumerate(partitions.values)})
    return kept_count_select(None if partitions is None else len(partitions.values), scopes), values
