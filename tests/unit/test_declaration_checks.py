"""The checks of declarations at start-up (ResourceSet.check): every registered resource passes them, and a table
that lacks a column the layer writes in every record (the audit columns, the revision among them) is refused with
one line naming it."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from petrecords.registry import RESOURCES
from petrecords.resources.declaration import AUDIT_COLUMNS, DeclarationError, ResourceSet
from petrecords.vaccines import VACCINES


def test_every_registered_resource_passes() -> None:
    RESOURCES.check()


def test_every_registered_table_has_the_audit_columns() -> None:
    for resource in RESOURCES.resources:
        assert set(AUDIT_COLUMNS) <= set(resource.table.columns.keys()), resource.name


@pytest.mark.parametrize("lacking", AUDIT_COLUMNS[1:])
def test_a_table_without_an_audit_column_is_refused(lacking: str) -> None:
    columns = [sa.Column(column.name, column.type) for column in VACCINES.table.columns if column.name != lacking]
    table = sa.Table("vaccines_without", sa.MetaData(), *columns)
    resource = dataclasses.replace(VACCINES, table=table)

    with pytest.raises(DeclarationError, match=f"lacks the audit columns {lacking} "):
        ResourceSet([resource]).check()
