"""The resources the service keeps. Adding one is a module, a migration and a line here."""

from __future__ import annotations

from petrecords.certificates.resource import PET_CERTIFICATES
from petrecords.due_rows import DUE_DOSES
from petrecords.pets import PETS
from petrecords.resources.declaration import ResourceSet
from petrecords.shares import PET_SHARES
from petrecords.tables import metadata
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from petrecords.webhooks.resource import WEBHOOKS

RESOURCES = ResourceSet(
    [
        PETS,
        VACCINES,
        PET_VACCINATIONS,
        PET_SHARES,
        PET_CERTIFICATES,
        WEBHOOKS,
    ],
    kept=[DUE_DOSES],
)

SCHEMA = metadata
"""Every table: the layer's own, and each registered resource's (defined, on this metadata, by its module)."""
