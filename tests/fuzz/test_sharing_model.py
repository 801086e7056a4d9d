"""Shared access against a model, driven by hypothesis on each database (contract v3 section 12).

A `RuleBasedStateMachine` makes pets and vaccinations, moves vaccinations between pets by PUT and PATCH (permitted
only to a caller who may write the vaccination both as it is and as it will be), shares pets with users and groups
(read or care), lets shares expire, be deleted or left, transfers pets (by an administrator, or by an owner to
themselves or a group of theirs) and deletes them; pets are owned by users and by groups (a clinic: every member has
the owner's rights), and callers join and leave groups (their next token lists the group, or no longer does). After
every step it checks that each caller's view equals the model's: every get, every list and its count, every history
(a moved vaccination's without the versions from while it belonged to a pet the caller may not see), the change
feed, which holds exactly the changes of what a share let the caller see while it granted access, and every change
of what they or one of their groups owned before or after it, whenever they joined, in commit order; and what is
due (contract section 14): the due list, its count, and each pet's vaccination status.

A share's expiry is made to pass by moving its `expiresAt` into the past in the database (as time would), with a
millisecond kept clear on either side so that every change is plainly before or after it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from litestar.testing import TestClient

from tests.conftest import stateful_settings
from tests.support import ADMIN, ALICE, BOB, run_sql, scalar_sql, token, until, wipe

Client = TestClient[Any]
CAROL = "carol@example.com"
DAVE = "dave@example.com"
GROUPS = {ALICE: (), BOB: ("clinic-a",), CAROL: ("clinic-a", "clinic-b"), DAVE: ()}
"""Who is in which group at first: callers join and leave them as the machine runs."""
CALLERS = tuple(GROUPS)
GROUP_NAMES = ("clinic-a", "clinic-b")
CLINIC_A, CLINIC_B = (f"group:{name}" for name in GROUP_NAMES)
GRANTEES = (BOB, CAROL, DAVE, CLINIC_A, CLINIC_B)
OWNERS = (ALICE, BOB, CLINIC_A)
ACCESS = ("read", "care")
VACCINE_NAME = "Core"


@dataclass
class Window:
    grantee: str
    opened: int
    closed: int | None = None
    expired: int | None = None
    """The sequence number of the step at which the share expired: changes after it were not granted."""


@dataclass
class Share:
    id: str
    pet: str
    grantee: str
    access: str
    expired: bool = False
    windows: list[Window] = field(default_factory=list)


@dataclass
class LoggedChange:
    resource: str
    id: str
    action: str
    shared_key: str | None
    owner_before: str | None
    owner_after: str | None
    grantee: str | None
    step: int
    """The step (the transaction) that made it: changes are compared step by step, each step's as a set."""
    moment: int
    """Its place in the log, in the order the model knows (steps in order)."""


@dataclass
class Version:
    """A write of a vaccination, as its history keeps it: the pet it left it on, its owner before and after."""

    pet: str
    before: str | None
    after: str | None


class SharingModel(RuleBasedStateMachine):
    pets = Bundle("pets")
    shares = Bundle("shares")

    def __init__(self, client: Client, database_url: str) -> None:
        super().__init__()
        self.client = client
        self.database_url = database_url
        asyncio.run(wipe(database_url))
        self.groups = dict(GROUPS)
        """The groups each caller's token lists now."""
        self.headers = {ADMIN: {"Authorization": f"Bearer {token(ADMIN, admin=True)}"}}
        for caller in CALLERS:
            self._issue_token(caller)
        self.owner: dict[str, str] = {}
        self.vaccinations: dict[str, str] = {}
        """Vaccination id -> its pet."""
        self.versions: dict[str, list[Version]] = {}
        """Every vaccination made, deleted ones too -> its versions."""
        self.deletions: dict[str, LoggedChange] = {}
        """A deleted vaccination -> the change of its deletion."""
        self.moved: set[str] = set()
        """The vaccinations moved to another pet at least once: their histories are checked after every step."""
        self.all_shares: dict[str, Share] = {}
        self.windows: dict[str, tuple[str, list[Window]]] = {}
        """Each share's pet and windows, kept once it is gone: the feed still holds what it granted."""
        self.log: list[LoggedChange] = []
        self.step = 0
        self.moment = 0
        vaccine = self.client.post(
            "/v1/vaccines", json={"name": VACCINE_NAME, "petType": "Dog", "duration": 30}, headers=self.headers[ADMIN]
        )
        assert vaccine.status_code == 201, vaccine.text
        self.vaccine = vaccine.json()["id"]
        self._log("vaccines", self.vaccine, "created", None, "", "")

    def teardown(self) -> None:
        """Once the expiry duty has taken every expired share out of the counts. The next run's wipe takes none of
        the locks the duty takes: a duty's transaction that read a share before the wipe would write the removal of
        its grants after it, into emptied counts (a grantee's -1, which CI once met as the next run's first total)."""
        asyncio.run(until(self._no_expiry_listed, what="the expiry duty to take out every expired share"))

    async def _no_expiry_listed(self) -> bool:
        return int(await scalar_sql(self.database_url, "SELECT count(*) FROM grant_expiries")) == 0

    # --- the model ------------------------------------------------------------------------------------

    def _issue_token(self, caller: str) -> None:
        groups = list(self.groups[caller]) or None
        self.headers[caller] = {"Authorization": f"Bearer {token(caller, groups=groups)}"}

    def grantees_of(self, caller: str) -> set[str]:
        """The caller and their groups now: whose shares grant to them, and whose records are theirs."""
        return {caller, *(f"group:{group}" for group in self.groups[caller])}

    def _an_owner(self, pet: str) -> str:
        """Who acts for the pet's owner: the owner, or a member of the owning group (an administrator when it has
        none)."""
        owner = self.owner[pet]
        return next((caller for caller in CALLERS if owner in self.grantees_of(caller)), ADMIN)

    def _log(
        self,
        resource: str,
        record_id: str,
        action: str,
        shared_key: str | None,
        before: str | None,
        after: str | None,
        grantee: str | None = None,
    ) -> None:
        self.moment += 1
        self.log.append(
            LoggedChange(resource, record_id, action, shared_key, before, after, grantee, self.step, self.moment)
        )

    def _active(self, pet: str) -> list[Share]:
        return [share for share in self.all_shares.values() if share.pet == pet and not share.expired]

    def _access(self, caller: str, pet: str) -> str | None:
        """What the caller may do with a pet's records: "own", "care", "read", or None."""
        if self.owner.get(pet) in self.grantees_of(caller):
            return "own"
        granted = {share.access for share in self._active(pet) if share.grantee in self.grantees_of(caller)}
        return "care" if "care" in granted else "read" if granted else None

    def _close(self, share: Share) -> None:
        share.windows[-1].closed = self.moment

    def _delete_share(self, share: Share) -> None:
        owner = self.owner[share.pet]
        self._log("pet-shares", share.id, "deleted", share.pet, owner, None, share.grantee)
        self._close(share)
        del self.all_shares[share.id]

    def _sees(self, caller: str, change: LoggedChange) -> bool:
        grantees = self.grantees_of(caller)
        if change.owner_after == "" or change.owner_before in grantees or change.owner_after in grantees:
            return True
        if change.shared_key is None:
            return False
        for pet, windows in self.windows.values():
            if pet != change.shared_key:
                continue
            for window in windows:
                if window.grantee not in grantees:
                    continue
                if change.grantee is not None and change.grantee != window.grantee:
                    continue
                after_expiry = window.expired is not None and change.moment > window.expired
                within = window.opened <= change.moment and (window.closed is None or change.moment <= window.closed)
                if within and not after_expiry:
                    return True
        return False

    # --- rules ----------------------------------------------------------------------------------------

    def _next_step(self) -> None:
        self.step += 1

    @rule(target=pets, owner=st.sampled_from(OWNERS), by=st.sampled_from(CALLERS))
    def create_pet(self, owner: str, by: str = "") -> Any:
        """A pet of a user's, by themselves (`by` ignored), or of a group's, by `by`: a member, or refused (403)."""
        self._next_step()
        creator = by if owner.startswith("group:") else owner
        body = {"name": "Rex", "petType": "Dog", "ownerId": owner}
        response = self.client.post("/v1/pets", json=body, headers=self.headers[creator])
        if owner not in self.grantees_of(creator):
            assert response.status_code == 403, response.text
            return multiple()
        assert response.status_code == 201, response.text
        pet: str = response.json()["id"]
        self.owner[pet] = owner
        self._log("pets", pet, "created", pet, None, owner)
        return pet

    @rule(target=shares, pet=pets, grantee=st.sampled_from(GRANTEES), access=st.sampled_from(ACCESS))
    def share(self, pet: str, grantee: str, access: str) -> str:
        self._next_step()
        owner = self.owner.get(pet)
        body = {"petId": pet, "grantee": grantee, "access": access}
        response = self.client.post(
            "/v1/pet-shares", json=body, headers=self.headers[self._an_owner(pet) if owner else ALICE]
        )
        if owner is None or owner == grantee:
            assert response.status_code == 400, response.text
            return ""
        if any(share.pet == pet and share.grantee == grantee for share in self.all_shares.values()):
            assert response.status_code == 409, response.text
            return ""
        assert response.status_code == 201, response.text
        share = Share(response.json()["id"], pet, grantee, access)
        self._log("pet-shares", share.id, "created", pet, owner, owner, grantee)
        share.windows.append(Window(grantee, self.moment))
        self.windows[share.id] = (pet, share.windows)
        self.all_shares[share.id] = share
        return share.id

    @rule(share_id=consumes(shares), by_grantee=st.booleans())
    def delete_share(self, share_id: str, by_grantee: bool) -> None:
        self._next_step()
        share = self.all_shares.get(share_id)
        if share is None:
            return
        caller = share.grantee if by_grantee and not share.grantee.startswith("group:") else self._an_owner(share.pet)
        response = self.client.delete(f"/v1/pet-shares/{share_id}", headers=self.headers[caller])
        assert response.status_code == 200, response.text
        self._delete_share(share)

    @rule(share_id=shares)
    def expire(self, share_id: str) -> None:
        self._next_step()
        share = self.all_shares.get(share_id)
        if share is None or share.expired:
            return
        time.sleep(0.002)
        moment = int(time.time() * 1000)
        stored = _stored_id(self.database_url, share_id)
        # As a share written with that expiry is stored: listed among those the grantees' counts still hold.
        for statement in (
            f"UPDATE pet_shares SET expires_at = {moment} WHERE id = '{stored}'",  # noqa: S608 - numbers and an id
            "INSERT INTO grant_expiries (share_id, resource, grantee, target_id, expires_at) "  # noqa: S608
            f"SELECT id, 'pet-shares', grantee, pet_id, {moment} FROM pet_shares WHERE id = '{stored}' "
            "ON CONFLICT (share_id) DO UPDATE SET expires_at = excluded.expires_at",
            f"UPDATE share_windows SET expires_at = {moment} WHERE share_id = '{stored}' AND until_xid IS NULL",  # noqa: S608
            # And the share's expiry as the due rows by grantee keep it (petrecords.due_rows.due_grants).
            f"UPDATE due_grants SET expires_at = {moment} WHERE EXISTS (SELECT 1 FROM pet_shares s "  # noqa: S608
            f"WHERE s.id = '{stored}' AND s.pet_id = due_grants.pet_id AND s.grantee = due_grants.grantee)",
        ):
            asyncio.run(run_sql(self.database_url, statement))
        time.sleep(0.002)
        share.expired = True
        share.windows[-1].expired = self.moment

    @initialize(target=pets, grantee=st.sampled_from(GRANTEES), access=st.sampled_from(ACCESS))
    def alices_shared_pet(self, grantee: str, access: str) -> str:
        pet = self._vaccinated_pet(ALICE)
        self.share(pet, grantee, access)
        return pet

    @initialize(target=pets)
    def bobs_vaccinated_pet(self) -> str:
        return self._vaccinated_pet(BOB)

    @initialize(target=pets)
    def a_clinics_vaccinated_pet(self) -> str:
        return self._vaccinated_pet(CLINIC_A, by=CAROL)

    def _vaccinated_pet(self, owner: str, by: str = "") -> str:
        """A pet of `owner`'s (made and vaccinated `by` a member of a group) with a vaccination, to begin with:
        something to move (between the owners' pets, by a grantee of both) from the first step."""
        pet: str = self.create_pet(owner, by)
        self.vaccinate(pet, by or owner)
        return pet

    @rule(pet=pets, caller=st.sampled_from(CALLERS))
    def vaccinate(self, pet: str, caller: str) -> None:
        self._next_step()
        body = {"petId": pet, "vaccineId": self.vaccine, "appliedAt": "2025-01-01T00:00:00Z"}
        response = self.client.post("/v1/pet-vaccination", json=body, headers=self.headers[caller])
        access = self._access(caller, pet) if pet in self.owner else None
        if access in ("own", "care"):
            assert response.status_code == 201, response.text
            vaccination: str = response.json()["id"]
            self.vaccinations[vaccination] = pet
            self.versions[vaccination] = [Version(pet, None, self.owner[pet])]
            self._log("pet-vaccination", vaccination, "created", pet, None, self.owner[pet])
        elif access == "read":
            assert response.status_code == 403, response.text
        else:
            assert response.status_code == 400, response.text

    @precondition(lambda self: bool(self.versions) and bool(self.owner))
    @rule(data=st.data())
    def move_by_put(self, data: st.DataObject) -> None:
        self._move(data, whole=True)

    @precondition(lambda self: bool(self.versions) and bool(self.owner))
    @rule(data=st.data())
    def move_by_patch(self, data: st.DataObject) -> None:
        self._move(data, whole=False)

    def _move(self, data: st.DataObject, *, whole: bool) -> None:
        """A vaccination (deleted ones too) moved to a pet by PUT (`whole`) or PATCH: 400 when the caller may not
        see that pet, 404 when they may not see the vaccination, 403 unless they may write the vaccinations of
        both pets. Half the time (when there is one) by one who may write it, to another pet they may see, where the
        outcome turns on what they may do with each pet."""
        self._next_step()
        vaccination = data.draw(st.sampled_from(sorted(self.versions)), label="vaccination")
        now = self.vaccinations.get(vaccination)
        moves = [
            (caller, pet)
            for caller in CALLERS
            if now is not None and self._access(caller, now) in ("own", "care")
            for pet in sorted(self.owner)
            if pet != now and self._access(caller, pet) is not None
        ]
        if moves and data.draw(st.booleans(), label="by one who may write it, to a pet they may see"):
            caller, pet = data.draw(st.sampled_from(moves), label="caller and pet")
        else:
            caller = data.draw(st.sampled_from(CALLERS), label="caller")
            pet = data.draw(st.sampled_from(sorted(self.owner)), label="pet")
        location = f"/v1/pet-vaccination/{vaccination}"
        if whole:
            body = {"petId": pet, "vaccineId": self.vaccine, "appliedAt": "2025-01-01T00:00:00Z"}
            response = self.client.put(location, json=body, headers=self.headers[caller])
        else:
            response = self.client.patch(location, json={"petId": pet}, headers=self.headers[caller])
        target = self._access(caller, pet) if pet in self.owner else None
        current = self._access(caller, now) if now is not None else None
        if target is None:
            assert response.status_code == 400, response.text
        elif current is None:
            assert response.status_code == 404, response.text
        elif "read" in (current, target):
            assert response.status_code == 403, response.text
        else:
            assert response.status_code == 200, response.text
            assert (response.json()["petId"], response.json()["ownerId"]) == (pet, self.owner[pet])
            assert now is not None
            before, after = self.owner[now], self.owner[pet]
            self.vaccinations[vaccination] = pet
            self.versions[vaccination].append(Version(pet, before, after))
            self._log("pet-vaccination", vaccination, "replaced", pet, before, after)
            if pet != now:
                self.moved.add(vaccination)

    @rule(caller=st.sampled_from(CALLERS), group=st.sampled_from(GROUP_NAMES))
    def join_or_leave(self, caller: str, group: str) -> None:
        """The caller joins the group, or leaves it: their next token lists it, or no longer does. Nothing is
        written: what they may see follows from the token alone."""
        groups = self.groups[caller]
        self.groups[caller] = tuple(one for one in groups if one != group) if group in groups else (*groups, group)
        self._issue_token(caller)

    @rule(pet=pets, new_owner=st.sampled_from((ALICE, BOB, CAROL, CLINIC_A, CLINIC_B)))
    def transfer(self, pet: str, new_owner: str) -> None:
        self._next_step()
        response = self.client.patch(f"/v1/pets/{pet}", json={"ownerId": new_owner}, headers=self.headers[ADMIN])
        if pet not in self.owner:
            assert response.status_code == 404, response.text
            return
        assert response.status_code == 200, response.text
        self._transferred(pet, new_owner)

    @rule(pet=pets, caller=st.sampled_from(CALLERS), new_owner=st.sampled_from((ALICE, BOB, CAROL, CLINIC_A, CLINIC_B)))
    def give_away(self, pet: str, caller: str, new_owner: str) -> None:
        """A caller gives a pet to a new owner: permitted to one of its owners (the user, or a member of the owning
        group), and only to themselves or a group they are a member of (403 otherwise, as for one who may see the
        pet through a share); 404 for one who may not see it."""
        self._next_step()
        response = self.client.patch(f"/v1/pets/{pet}", json={"ownerId": new_owner}, headers=self.headers[caller])
        access = self._access(caller, pet) if pet in self.owner else None
        if access is None:
            assert response.status_code == 404, response.text
        elif access != "own" or new_owner not in self.grantees_of(caller):
            assert response.status_code == 403, response.text
        else:
            assert response.status_code == 200, response.text
            self._transferred(pet, new_owner)

    def _transferred(self, pet: str, new_owner: str) -> None:
        """A pet's write that names its owner: a transfer when the owner changes (its shares go, its vaccinations
        follow it)."""
        old = self.owner[pet]
        if old == new_owner:
            self._log("pets", pet, "replaced", pet, old, old)
            return
        for share in [share for share in self.all_shares.values() if share.pet == pet]:
            self._delete_share(share)
        self._log("pets", pet, "replaced", pet, old, new_owner)
        self.owner[pet] = new_owner
        for vaccination, of_pet in self.vaccinations.items():
            if of_pet == pet:
                self.versions[vaccination].append(Version(pet, old, new_owner))
                self._log("pet-vaccination", vaccination, "replaced", pet, old, new_owner)

    @rule(pet=consumes(pets))
    def delete_pet(self, pet: str) -> None:
        self._next_step()
        owner = self.owner.get(pet)
        response = self.client.delete(f"/v1/pets/{pet}", headers=self.headers[self._an_owner(pet) if owner else ALICE])
        if owner is None:
            assert response.status_code == 404, response.text
            return
        assert response.status_code == 200, response.text
        for vaccination in [one for one, of_pet in self.vaccinations.items() if of_pet == pet]:
            self.versions[vaccination].append(Version(pet, owner, None))
            self._log("pet-vaccination", vaccination, "deleted", pet, owner, None)
            self.deletions[vaccination] = self.log[-1]
            del self.vaccinations[vaccination]
        self._log("pets", pet, "deleted", pet, owner, None)
        for share in [share for share in self.all_shares.values() if share.pet == pet]:
            self._delete_share(share)
        del self.owner[pet]

    # --- every caller's view --------------------------------------------------------------------------

    def _listed(self, path: str, caller: str, **params: str) -> tuple[set[str], int]:
        response = self.client.get(path, params={"pageSize": "100", **params}, headers=self.headers[caller])
        assert response.status_code == 200, response.text
        body = response.json()
        return {item["id"] for item in body["items"]}, body["totalCount"]

    @invariant()
    def each_callers_view_is_the_models(self) -> None:
        for caller in CALLERS:
            pets = {pet for pet in self.owner if self._access(caller, pet) is not None}
            assert self._listed("/v1/pets", caller) == (pets, len(pets)), caller
            grantees = self.grantees_of(caller)
            shared = {pet for pet in pets if self.owner[pet] not in grantees}
            assert self._listed("/v1/pets", caller, access="shared") == (shared, len(shared)), caller
            owned = pets - shared
            assert self._listed("/v1/pets", caller, access="owned") == (owned, len(owned)), caller
            doses = {one for one, pet in self.vaccinations.items() if pet in pets}
            assert self._listed("/v1/pet-vaccination", caller) == (doses, len(doses)), caller
            named = {
                share.id
                for share in self.all_shares.values()
                if self.owner[share.pet] in grantees or share.grantee in grantees
            }
            assert self._listed("/v1/pet-shares", caller) == (named, len(named)), caller
            for pet in self.owner:
                status = self.client.get(f"/v1/pets/{pet}", headers=self.headers[caller]).status_code
                history = self.client.get(f"/v1/pets/{pet}/history", headers=self.headers[caller]).status_code
                assert (status, history) == ((200, 200) if pet in pets else (404, 404)), (caller, pet)
            for vaccination in sorted(self.moved):
                self._check_history(caller, vaccination)
            self._check_feed(caller)
            self._check_due(caller, pets)
        self._check_due(ADMIN, set(self.owner))

    def _check_history(self, caller: str, vaccination: str) -> None:
        """A vaccination's history shows whoever may read it (or, once deleted, could just before it went) its
        versions from while it belonged to a pet they may see now (or saw it through just before it went), and
        those of the writes before or after which it was theirs."""
        response = self.client.get(
            f"/v1/pet-vaccination/{vaccination}/history", params={"pageSize": "100"}, headers=self.headers[caller]
        )
        now = self.vaccinations.get(vaccination)
        deletion = self.deletions.get(vaccination)
        if now is not None:
            readable = self._access(caller, now) is not None
        else:
            readable = deletion is not None and self._sees(caller, deletion)
        if not readable:
            assert response.status_code == 404, (caller, vaccination, response.text)
            return
        assert response.status_code == 200, response.text
        versions = self.versions[vaccination]
        seen = {versions[-1].pet, *(pet for pet in self.owner if self._access(caller, pet) is not None)}
        expected = [
            number
            for number, version in enumerate(versions, start=1)
            if version.pet in seen or bool({version.before, version.after} & self.grantees_of(caller))
        ]
        body = response.json()
        assert [item["version"] for item in body["items"]] == expected, (caller, vaccination, versions)
        assert body["totalCount"] == len(expected)

    def _check_feed(self, caller: str) -> None:
        found: list[tuple[str, str, str]] = []
        after: str | None = None
        while True:
            params = {"limit": "1000", **({"after": after} if after else {})}
            response = self.client.get("/v1/changes", params=params, headers=self.headers[caller])
            assert response.status_code == 200, response.text
            page = response.json()
            found.extend((item["resource"], item["id"], item["action"]) for item in page["items"])
            after = page["nextCursor"]
            if not page["items"]:
                break
        expected = [change for change in self.log if self._sees(caller, change)]
        # Step by step: within one transaction, the model does not know the order of its changes.
        position = 0
        for step in sorted({change.step for change in expected}):
            of_step = {(c.resource, c.id, c.action) for c in expected if c.step == step}
            assert set(found[position : position + len(of_step)]) == of_step, (caller, step, found, expected)
            position += len(of_step)
        assert position == len(found), (caller, found[position:])

    def _check_due(self, caller: str, pets: set[str]) -> None:
        """What is due (contract section 14): every dose is of the one vaccine, applied at the same instant and long
        overdue, so each pet the caller may see that has a dose is due once, at its dose of the greatest id (the
        ids are time-ordered UUIDs, whose text sorts as they do); every pet's status is its owner's and grantees'."""
        latest: dict[str, str] = {}
        for vaccination, pet in self.vaccinations.items():
            latest[pet] = max(latest.get(pet, vaccination), vaccination)
        # An admin sees every pet; no pet is shared with them.
        owners = {caller} if caller == ADMIN else self.grantees_of(caller)
        for scope in (None,) if caller == ADMIN else (None, "shared"):
            seen = {pet for pet in pets if scope is None or self.owner[pet] not in owners}
            expected = {(pet, latest[pet]) for pet in seen if pet in latest}
            params = {"pageSize": "100", **({"access": scope} if scope else {})}
            response = self.client.get("/v1/due", params=params, headers=self.headers[caller])
            assert response.status_code == 200, response.text
            body = response.json()
            found = {(item["petId"], item["vaccinationId"]) for item in body["items"]}
            assert (found, body["totalCount"]) == (expected, len(expected)), (caller, scope)
            # In the list's order: by dueAt, then petId (one group each), whichever rows the page was read from.
            order = [(item["dueAt"], item["petId"]) for item in body["items"]]
            assert order == sorted(order), (caller, scope, order)
        for pet in self.owner:
            response = self.client.get(f"/v1/pets/{pet}/vaccination-status", headers=self.headers[caller])
            if pet not in pets:
                assert response.status_code == 404, (caller, pet, response.text)
                continue
            assert response.status_code == 200, response.text
            doses = [item["vaccinationId"] for item in response.json()["items"]]
            assert doses == ([latest[pet]] if pet in latest else []), (caller, pet)


def _stored_id(database_url: str, record_id: str) -> str:
    """An id as the database stores it: SQLite's uuid columns hold its hex."""
    return record_id.replace("-", "") if database_url.startswith("sqlite") else record_id


@pytest.mark.hypothesis
def test_each_callers_view_equals_the_models(sync_client: Client, database_url: str, stateful_part: int) -> None:
    """As many runs, of as many steps, as the Hypothesis profile says (tests/conftest.py)."""
    run_state_machine_as_test(lambda: SharingModel(sync_client, database_url), settings=stateful_settings())
