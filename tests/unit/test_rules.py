"""The rules of pet records, free of HTTP and storage (petrecords.pets.rules)."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.config import DEFAULT_PET_TYPES
from petrecords.errors import MalformedRequest, ValidationFailed
from petrecords.pets import NAME_MAX_LENGTH, PETS
from petrecords.resources.fields import PET_TYPES as PET_TYPES_SETTING
from petrecords.resources.fields import Choices, Context
from petrecords.resources.filters import like_pattern
from petrecords.resources.listing import ListRequest, list_parameters, parse_list_query, query_pairs
from petrecords.resources.requests import EntityTags, canonical_json_hash, check_idempotency_key, read_body
from petrecords.store.base import Operator, SortKey
from petrecords.text import clean_name
from petrecords.text import match_key as name_key
from petrecords.values import parse_datetime_ms
from tests.support import is_a_valid_name

PET_TYPES = Choices(DEFAULT_PET_TYPES)
LIST_PARAMETERS = list_parameters(PETS)


class _PetWrite(NamedTuple):
    name: Any
    pet_type: Any
    owner_id: Any


def validate_pet_write(document: Any, *, pet_types: Choices, path_id: str | None = None) -> _PetWrite:
    """The pet resource's reading of a create or replace body."""
    values = read_body(
        PETS, document, context=Context({PET_TYPES_SETTING: pet_types}, now_ms=0), path_id=path_id
    ).values
    return _PetWrite(values.get("name"), values.get("pet_type"), values.get("owner_id"))


def _values(request: ListRequest, column: str, operator: Operator = Operator.IN) -> tuple[Any, ...] | None:
    """The values of the request's condition on `column`, or None when it has none."""
    for condition in request.conditions:
        if condition.columns == (column,) and condition.operator is operator:
            return condition.values
    return None


ID_A = "0190f3c4-5e6a-7b8c-9d0e-1f2a3b4c5d6e"
ID_B = "0190f3c4-5e6a-7b8c-9d0e-1f2a3b4c5d6f"
ID_C = "0190f3c4-5e6a-7b8c-9d0e-1f2a3b4c5d70"


def _trimmed(text: str) -> str:
    """`text` without leading and trailing Unicode White_Space (which, unlike str.isspace, excludes U+001C–U+001F)."""
    white_space = [char for char in set(text) if char.isspace() and char not in "\x1c\x1d\x1e\x1f"]
    return text.strip("".join(white_space)) if white_space else text


def _forbidden(char: str) -> bool:
    code = ord(char)
    return code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF


# --- names ---------------------------------------------------------------------------------------


class TestCleanName:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("Rex", "Rex"),
            ("  Rex  ", "Rex"),
            ("\t\nRex the Dog\r\n", "Rex the Dog"),
            ("\u3000\xa0Rex\u2028\x85", "Rex"),
            ("R", "R"),
            ("x" * 100, "x" * 100),
            ("  " + "x" * 100 + "  ", "x" * 100),
            ("é" * 100, "é" * 100),
            ("🐶" * 100, "🐶" * 100),  # code points, not UTF-16 units or bytes
            ("Mr. Whiskers-O'Hara (2nd)", "Mr. Whiskers-O'Hara (2nd)"),
            ("猫", "猫"),
        ],
    )
    def test_valid(self, value: str, expected: str) -> None:
        assert clean_name(value, max_length=NAME_MAX_LENGTH) == (expected, None)

    @pytest.mark.parametrize(
        "value",
        [
            "",
            "   ",
            "\t\n",
            "x" * 101,
            "Re\x00x",
            "Re\x1bx",
            "Re\nx",
            "Re\x7fx",
            "Re\x85x",
            "Re\x9fx",
            "Re\ud800x",
            "\x1cRex",  # a control character, though str.isspace() calls it white space
            "Rex\x1f",
        ],
    )
    def test_invalid(self, value: str) -> None:
        name, problem = clean_name(value, max_length=NAME_MAX_LENGTH)
        assert name is None
        assert problem

    @pytest.mark.parametrize("value", [None, 5, 1.5, True, ["Rex"], {"name": "Rex"}])
    def test_not_a_string(self, value: object) -> None:
        assert clean_name(value, max_length=NAME_MAX_LENGTH) == (None, "must be a string.")

    @given(
        st.one_of(
            st.text(st.characters(exclude_categories=())),
            st.text(st.sampled_from("ab \t\x00\x1c\x7f\x85\xa0\u2028é🐶\ud800"), min_size=95, max_size=106),
        )
    )
    def test_valid_iff_1_to_100_code_points_without_control_characters_and_one_visible(self, value: str) -> None:
        stripped = _trimmed(value)
        valid = is_a_valid_name(stripped)
        name, problem = clean_name(value, max_length=NAME_MAX_LENGTH)
        if valid:
            assert (name, problem) == (stripped, None)
        else:
            assert name is None
            assert problem


# --- pet bodies ----------------------------------------------------------------------------------


class TestValidatePetWrite:
    def test_valid_body_is_cleaned(self) -> None:
        pet = validate_pet_write({"name": "  Rex ", "petType": "dOG"}, pet_types=PET_TYPES)
        assert (pet.name, pet.pet_type, pet.owner_id) == ("Rex", "Dog", None)

    def test_owner_is_lower_cased(self) -> None:
        pet = validate_pet_write({"name": "Rex", "petType": "Cat", "ownerId": "Bob@Example.COM"}, pet_types=PET_TYPES)
        assert pet.owner_id == "bob@example.com"

    def test_null_owner_is_absent(self) -> None:
        pet = validate_pet_write({"name": "Rex", "petType": "Cat", "ownerId": None}, pet_types=PET_TYPES)
        assert pet.owner_id is None

    @pytest.mark.parametrize("path_id", [None, ID_A])
    def test_read_only_fields_of_any_type_are_ignored(self, path_id: str | None) -> None:
        document = {
            "name": "Rex",
            "petType": "Dog",
            "createdAt": "whatever",
            "createdBy": 5,
            "modifiedAt": None,
            "modifiedBy": ["x"],
        }
        pet = validate_pet_write(document, pet_types=PET_TYPES, path_id=path_id)
        assert (pet.name, pet.pet_type, pet.owner_id) == ("Rex", "Dog", None)

    @pytest.mark.parametrize("given_id", [ID_B, 5, None, "", "nope"])
    def test_id_is_ignored_on_create(self, given_id: object) -> None:
        pet = validate_pet_write({"id": given_id, "name": "Rex", "petType": "Dog"}, pet_types=PET_TYPES)
        assert pet.name == "Rex"

    @pytest.mark.parametrize("given_id", [ID_A, ID_A.upper()])
    def test_id_equal_to_the_path_id_is_accepted_on_replace(self, given_id: str) -> None:
        pet = validate_pet_write({"id": given_id, "name": "Rex", "petType": "Dog"}, pet_types=PET_TYPES, path_id=ID_A)
        assert pet.name == "Rex"

    @pytest.mark.parametrize("given_id", [ID_B, 5, None, "", "nope", [ID_A]])
    def test_id_other_than_the_path_id_is_rejected_on_replace(self, given_id: object) -> None:
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write({"id": given_id, "name": "Rex", "petType": "Dog"}, pet_types=PET_TYPES, path_id=ID_A)
        assert set(caught.value.errors) == {"id"}

    def test_missing_required_fields_are_both_reported(self) -> None:
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write({}, pet_types=PET_TYPES)
        assert set(caught.value.errors) == {"name", "petType"}
        assert "name" in caught.value.message
        assert "petType" in caught.value.message

    def test_every_offending_field_is_reported_at_once(self) -> None:
        document = {"name": " ", "petType": "Unicorn", "ownerId": "not-an-email", "id": 5, "colour": "red", "age": 3}
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write(document, pet_types=PET_TYPES, path_id=ID_A)
        error = caught.value
        assert set(error.errors) == {"name", "petType", "ownerId", "id", "colour", "age"}
        for field in error.errors:
            assert field in error.message
        assert all(error.errors[field] for field in error.errors)
        assert (error.status, error.code) == (400, 994)

    def test_rejected_pet_type_lists_the_allowed_values(self) -> None:
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write({"name": "Rex", "petType": "Unicorn"}, pet_types=PET_TYPES)
        message = " ".join(caught.value.errors["petType"])
        for spelling in DEFAULT_PET_TYPES:
            assert spelling in message
        for spelling in DEFAULT_PET_TYPES:
            assert spelling in caught.value.message

    @pytest.mark.parametrize("pet_type", [None, 1, ["Dog"], {"x": "Dog"}, "", " Dog", "Dogs"])
    def test_bad_pet_type(self, pet_type: object) -> None:
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write({"name": "Rex", "petType": pet_type}, pet_types=PET_TYPES)
        assert set(caught.value.errors) == {"petType"}

    @pytest.mark.parametrize("owner", [5, "", "alice", "alice@example", ["alice@example.com"]])
    def test_bad_owner(self, owner: object) -> None:
        with pytest.raises(ValidationFailed) as caught:
            validate_pet_write({"name": "Rex", "petType": "Dog", "ownerId": owner}, pet_types=PET_TYPES)
        assert set(caught.value.errors) == {"ownerId"}

    @pytest.mark.parametrize("document", [None, [], "Rex", 5, [{"name": "Rex", "petType": "Dog"}]])
    def test_not_an_object(self, document: object) -> None:
        with pytest.raises(ValidationFailed):
            validate_pet_write(document, pet_types=PET_TYPES)

    @given(
        st.dictionaries(
            st.sampled_from(["name", "petType", "ownerId", "id", "createdAt", "other"]) | st.text(max_size=5),
            st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["Dog", "a@b.cd"]),
            max_size=7,
        )
    )
    def test_any_document_is_accepted_or_a_validation_failure(self, document: dict[str, object]) -> None:
        failure: ValidationFailed | None = None
        try:
            pet = validate_pet_write(document, pet_types=PET_TYPES)
        except ValidationFailed as exc:
            failure = exc
        if failure is not None:
            assert failure.errors
            assert all(field in failure.message for field in failure.errors)
        else:
            assert pet.pet_type in DEFAULT_PET_TYPES
            assert clean_name(pet.name, max_length=NAME_MAX_LENGTH) == (pet.name, None)


class TestPetTypes:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("Dog", "Dog"),
            ("dog", "Dog"),
            ("DOG", "Dog"),
            ("guineapig", "GuineaPig"),
            ("GUINEAPIG", "GuineaPig"),
            ("capyBARA", "Capybara"),
            ("Unicorn", None),
            ("", None),
            ("Guinea Pig", None),
        ],
    )
    def test_resolve_is_case_insensitive_and_returns_the_configured_spelling(
        self, value: str, expected: str | None
    ) -> None:
        assert PET_TYPES.resolve(value) == expected

    def test_expected_lists_every_type_in_order(self) -> None:
        assert PET_TYPES.expected == "one of " + ", ".join(DEFAULT_PET_TYPES)

    def test_configured_spelling_is_kept(self) -> None:
        types = Choices(["axolotl", "T-Rex"])
        assert types.resolve("AXOLOTL") == "axolotl"
        assert types.resolve("t-rex") == "T-Rex"
        assert types.resolve("Dog") is None


# --- LIKE patterns -------------------------------------------------------------------------------


def _api_regex(user_pattern: str) -> str:
    """The contract's pattern syntax as a regular expression over lower-cased text (reference)."""
    out: list[str] = []
    index = 0
    while index < len(user_pattern):
        char = user_pattern[index]
        if char == "\\" and index + 1 < len(user_pattern) and user_pattern[index + 1] in "%_\\":
            out.append(re.escape(user_pattern[index + 1]))
            index += 2
            continue
        if char == "%":
            out.append(".*")
        elif char == "_":
            out.append(".")
        else:
            out.append(re.escape(char.lower()))
        index += 1
    return "".join(out)


def _sql_like_regex(like: str) -> str:
    """SQL `LIKE ... ESCAPE '\\'` as a regular expression (reference)."""
    out: list[str] = []
    index = 0
    while index < len(like):
        char = like[index]
        if char == "\\":
            if index + 1 == len(like):
                raise AssertionError(f"dangling escape at the end of the LIKE pattern {like!r}")
            out.append(re.escape(like[index + 1]))
            index += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    return "".join(out)


def _like_matches(like: str, text: str) -> bool:
    return re.fullmatch(_sql_like_regex(like), text, re.DOTALL) is not None


def _escape_api(text: str) -> str:
    """A pattern of the API's syntax that matches exactly `text`."""
    return re.sub(r"([%_\\])", r"\\\1", text)


class TestLikePattern:
    @pytest.mark.parametrize(
        ("user_pattern", "expected"),
        [
            ("Rex", "rex"),
            ("", ""),
            ("R%x_", "r%x_"),
            ("%", "%"),
            ("_", "_"),
            (r"50\%", r"50\%"),
            (r"a\_b", r"a\_b"),
            (r"a\\b", r"a\\b"),  # an escaped backslash stays one literal backslash
            (r"\\%", r"\\%"),  # a literal backslash, then a wildcard
            (r"abc\ ".strip(), r"abc\\"),  # a lone trailing backslash is literal
            ("\\", r"\\"),
            (r"a\b", r"a\\b"),  # any other backslash is literal
            (r"\A", r"\\a"),
            (r"\\\%", r"\\\%"),
            ("ÄBC Straße", "äbc straße"),
        ],
    )
    def test_exact(self, user_pattern: str, expected: str) -> None:
        assert like_pattern(user_pattern, substring=False) == expected

    def test_substring_is_wrapped_in_wildcards(self) -> None:
        assert like_pattern("Rex", substring=True) == "%rex%"
        assert like_pattern(r"5\%", substring=True) == r"%5\%%"
        assert like_pattern("", substring=True) == "%%"

    @pytest.mark.parametrize(
        ("user_pattern", "name", "matches"),
        [
            ("rex", "Rex", True),
            ("REX", "rex", True),
            ("re", "Rex", False),
            ("r%", "Rex", True),
            ("r_x", "Rex", True),
            ("r_x", "Rx", False),
            (r"50\%", "50%", True),
            (r"50\%", "500", False),
            (r"a\_b", "a_b", True),
            (r"a\_b", "axb", False),
            (r"a\\b", "a\\b", True),
            (r"a\b", "a\\b", True),
            ("a\\", "a\\", True),
            ("a\\", "a", False),
        ],
    )
    def test_matches_the_lower_cased_name(self, user_pattern: str, name: str, matches: bool) -> None:
        assert _like_matches(like_pattern(user_pattern, substring=False), name_key(name)) is matches

    @pytest.mark.parametrize("name", ["ΟΔΥΣΣΕΥΣ", "ΑΣ", "ΦΙΛΟΣ ΜΟΥ", "Σ Σ"])
    def test_a_whole_name_matches_itself_whatever_its_script(self, name: str) -> None:
        # Final sigma: str.lower() of the whole name gives "ς" where the pattern's per-character lower gives "σ".
        assert _like_matches(like_pattern(_escape_api(name), substring=False), name_key(name))

    @given(
        st.text(st.sampled_from("aAbB%_\\xX.*é É\n"), max_size=8),
        st.text(st.sampled_from("aAbB%_\\xX.*é É\n"), max_size=8),
    )
    def test_sql_like_semantics_equal_the_contract(self, user_pattern: str, name: str) -> None:
        stored = name_key(name)
        exact = re.fullmatch(_api_regex(user_pattern), stored, re.DOTALL) is not None
        contained = re.search(_api_regex(user_pattern), stored, re.DOTALL) is not None
        assert _like_matches(like_pattern(user_pattern, substring=False), stored) is exact
        assert _like_matches(like_pattern(user_pattern, substring=True), stored) is contained

    @given(st.text())
    def test_an_escaped_name_matches_exactly_that_name(self, name: str) -> None:
        pattern = like_pattern(_escape_api(name), substring=False)
        assert _like_matches(pattern, name_key(name))
        assert _like_matches(like_pattern(_escape_api(name), substring=True), name_key("x" + name + "y"))

    @given(st.text())
    def test_never_ends_in_a_dangling_escape(self, user_pattern: str) -> None:
        for substring in (False, True):
            _sql_like_regex(like_pattern(user_pattern, substring=substring))


# --- list queries --------------------------------------------------------------------------------


def _parse(pairs: Sequence[tuple[str, str]], *, max_page_size: int = 100) -> tuple[ListRequest, str | None]:
    request = parse_list_query(
        PETS,
        pairs,
        context=Context({PET_TYPES_SETTING: PET_TYPES}, now_ms=0),
        default_page_size=20,
        max_page_size=max_page_size,
    )
    return request, request.owner


def _errors(pairs: Sequence[tuple[str, str]]) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        _parse(pairs)
    return caught.value


class TestParseListQuery:
    def test_defaults(self) -> None:
        request, owner = _parse([])
        assert owner is None
        assert request.page_index == 1
        assert request.page_size == 20
        assert request.offset == 0
        assert request.conditions == ()
        assert request.sort == (SortKey("created_at"), SortKey("id"))

    def test_paging(self) -> None:
        request, _ = _parse([("pageIndex", "3"), ("pageSize", "7")])
        assert (request.page_index, request.page_size, request.offset) == (3, 7, 14)

    @pytest.mark.parametrize(("given_size", "used"), [("100", 100), ("101", 100), ("100000", 100), ("1", 1)])
    def test_page_size_above_the_maximum_is_reduced(self, given_size: str, used: int) -> None:
        request, _ = _parse([("pageSize", given_size)])
        assert request.page_size == used

    def test_configured_maximum(self) -> None:
        request, _ = _parse([("pageSize", "50")], max_page_size=30)
        assert request.page_size == 30

    @pytest.mark.parametrize("name", ["pageIndex", "pageSize"])
    @pytest.mark.parametrize("value", ["0", "-1", "", "x", "1.5", "1e3", " 2", "+2", "٣", "²", "000"])
    def test_bad_integers(self, name: str, value: str) -> None:
        error = _errors([(name, value)])
        assert set(error.errors) == {name}
        assert name in error.message

    def test_page_index_beyond_what_json_holds_exactly_is_400(self) -> None:
        error = _errors([("pageIndex", str(2**53))])
        assert set(error.errors) == {"pageIndex"}

    @pytest.mark.parametrize("value", [str(2**53 - 1), "9" * 40, "0" * 50 + "7"])
    def test_any_large_page_size_is_reduced_to_the_maximum(self, value: str) -> None:
        request, _ = _parse([("pageSize", value)], max_page_size=30)
        assert request.page_size == min(int(value), 30)

    def test_errors_name_each_bad_parameter(self) -> None:
        pairs = [
            ("pageIndex", "x"),
            ("pageSize", "0"),
            ("ids", "nope"),
            ("petType", "Unicorn"),
            ("ownerId", "not-an-email"),
            ("createdFrom", "yesterday"),
            ("createdTo", "2026-02-30T00:00:00Z"),
            ("modifiedFrom", "2026-11-21"),
            ("modifiedTo", "later"),
            ("sort", "colour"),
            ("order", "up"),
            ("colour", "red"),
            ("PageSize", "5"),  # parameter names are case-sensitive
        ]
        error = _errors(pairs)
        assert set(error.errors) == {name for name, _ in pairs}
        for name, _ in pairs:
            assert name in error.message
            assert error.errors[name]
        assert (error.status, error.code) == (400, 994)

    def test_unknown_parameter_alone(self) -> None:
        error = _errors([("limit", "5")])
        assert set(error.errors) == {"limit"}

    @pytest.mark.parametrize("name", ["pageIndex", "pageSize", "ownerId", "name", "search", "createdFrom", "order"])
    def test_single_valued_parameters_given_twice(self, name: str) -> None:
        error = _errors([(name, "1"), (name, "1")])
        assert name in error.errors

    def test_ids_comma_separated_and_repeated(self) -> None:
        request, _ = _parse([("ids", f"{ID_A},{ID_B.upper()}"), ("ids", ID_C), ("ids", ID_A)])
        assert _values(request, "id") == (uuid.UUID(ID_A), uuid.UUID(ID_B), uuid.UUID(ID_C))

    @pytest.mark.parametrize(
        "value", [f"{ID_A},nope", f"{ID_A},", "{" + ID_A + "}", ID_A.replace("-", ""), f"urn:uuid:{ID_A}"]
    )
    def test_malformed_ids(self, value: str) -> None:
        assert set(_errors([("ids", value)]).errors) == {"ids"}

    def test_pet_types_comma_separated_and_repeated_case_insensitive(self) -> None:
        request, _ = _parse([("petType", "dog, CAT"), ("petType", "guineapig"), ("petType", "Dog")])
        assert _values(request, "pet_type") == ("Dog", "Cat", "GuineaPig")

    def test_unknown_pet_type(self) -> None:
        error = _errors([("petType", "Dog,Unicorn")])
        assert set(error.errors) == {"petType"}
        assert "Capybara" in error.message

    def test_owner_is_returned_lower_cased_not_put_in_the_filter(self) -> None:
        request, owner = _parse([("ownerId", "Bob@Example.com")])
        assert owner == "bob@example.com"
        assert all("owner_id" not in condition.columns for condition in request.conditions)

    def test_name_and_search_become_like_patterns(self) -> None:
        request, _ = _parse([("name", "R_x"), ("search", r"5\%")])
        patterns = [condition.values[0] for condition in request.conditions if condition.operator is Operator.LIKE]
        assert patterns == ["r_x", r"%5\%%"]

    def test_overlong_pattern(self) -> None:
        assert set(_errors([("search", "x" * 201)]).errors) == {"search"}

    def test_time_bounds(self) -> None:
        at = 1_795_277_189_123  # 2026-11-21T16:06:29.123Z
        request, _ = _parse(
            [
                ("createdFrom", "2026-11-21T16:06:29.123Z"),
                ("createdTo", "2026-11-21T17:06:29.123+01:00"),
                ("modifiedFrom", "2026-11-21T17:06:29.123 01:00"),  # '+' decoded as a space
                ("modifiedTo", "2026-11-21T11:06:29.123-05:00"),
            ]
        )
        assert _values(request, "created_at", Operator.AT_LEAST) == (at,)
        assert _values(request, "created_at", Operator.BELOW) == (at,)
        assert _values(request, "modified_at", Operator.AT_LEAST) == (at,)
        assert _values(request, "modified_at", Operator.BELOW) == (at,)

    def test_sub_millisecond_bounds_round_up(self) -> None:
        # Stored values are whole milliseconds: >= x.1234 means >= x.124, and < x.1234 means < x.124 too.
        request, _ = _parse([("createdFrom", "2026-11-21T16:06:29.1231Z"), ("createdTo", "2026-11-21T16:06:29.1239Z")])
        assert _values(request, "created_at", Operator.AT_LEAST) == (1_795_277_189_124,)
        assert _values(request, "created_at", Operator.BELOW) == (1_795_277_189_124,)
        exact = parse_datetime_ms("2026-11-21T16:06:29.123Z")
        assert exact == 1_795_277_189_123

    @pytest.mark.parametrize(
        ("pairs", "expected"),
        [
            ([("sort", "name")], [("name_key", False), ("id", False)]),
            (
                [("sort", "name,-createdAt")],
                [("name_key", False), ("created_at", True), ("id", False)],
            ),
            (
                [("sort", "name,-createdAt"), ("order", "desc")],
                [("name_key", True), ("created_at", True), ("id", False)],
            ),
            (
                [("sort", "PETTYPE"), ("sort", "-OwnerId")],
                [("pet_type", False), ("owner_id", True), ("id", False)],
            ),
            ([("order", "desc")], [("created_at", True), ("id", False)]),
            ([("order", "DESC")], [("created_at", True), ("id", False)]),
            ([("order", "asc")], [("created_at", False), ("id", False)]),
            ([("sort", "-id")], [("id", True)]),
            ([("sort", "id,name")], [("id", False), ("name_key", False)]),
            ([("sort", "createdBy,modifiedAt,modifiedBy")], None),
        ],
    )
    def test_sort(self, pairs: list[tuple[str, str]], expected: list[tuple[str, bool]] | None) -> None:
        request, _ = _parse(pairs)
        if expected is None:
            expected = [
                ("created_by", False),
                ("modified_at", False),
                ("modified_by", False),
                ("id", False),
            ]
        assert [(key.column, key.descending) for key in request.sort] == expected

    @pytest.mark.parametrize("value", ["colour", "name,name", "name,-NAME", "--name", "-", "", "name,", "+name"])
    def test_bad_sort(self, value: str) -> None:
        error = _errors([("sort", value)])
        assert set(error.errors) == {"sort"}
        assert "createdAt" in error.message

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(LIST_PARAMETERS) | st.text(max_size=6),
                st.one_of(
                    st.text(max_size=12),
                    st.sampled_from(["1", "0", "-1", "100000", "Dog", "dog,cat", ID_A, "-name,id", "desc"]),
                    st.sampled_from(["2026-11-21T16:06:29.123Z", "9999-12-31T23:59:59+23:59", "0001-01-01T00:00:00Z"]),
                    st.from_regex(
                        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,10})?([Zz]|[+ -]\d{2}:\d{2})", fullmatch=True
                    ),
                ),
            ),
            max_size=8,
        )
    )
    def test_arbitrary_queries_raise_only_validation_errors(self, pairs: list[tuple[str, str]]) -> None:
        try:
            request, _ = _parse(pairs)
        except (ValidationFailed, MalformedRequest):
            return
        assert request.page_index >= 1
        assert 1 <= request.page_size <= 100
        assert any(key.column == "id" for key in request.sort)

    @given(st.binary(max_size=300))
    def test_arbitrary_query_strings_raise_only_validation_errors(self, query_string: bytes) -> None:
        with contextlib.suppress(ValidationFailed, MalformedRequest):
            _parse(query_pairs(query_string))


class TestQueryPairs:
    def test_repeated_and_blank_values_are_kept(self) -> None:
        assert query_pairs(b"a=1&b=&a=2&name=R%25x+y") == [("a", "1"), ("b", ""), ("a", "2"), ("name", "R%x y")]

    def test_invalid_utf8(self) -> None:
        with pytest.raises(MalformedRequest):
            query_pairs(b"name=%ff")

    def test_too_many_parameters(self) -> None:
        with pytest.raises(MalformedRequest):
            query_pairs(b"&".join([b"ids=x"] * 201))


# --- ETags ---------------------------------------------------------------------------------------


class TestEntityTags:
    @pytest.mark.parametrize(
        ("value", "tags"),
        [
            ("*", None),
            (" * ", None),
            ('"abc"', ('"abc"',)),
            ('""', ('""',)),
            ('W/"abc"', ('W/"abc"',)),
            (' "a" , W/"b",  "c" ', ('"a"', 'W/"b"', '"c"')),
            # An entity tag may hold a comma (found by schemathesis: the list used to be split at it).
            ('"a,b", W/",", "c"', ('"a,b"', 'W/","', '"c"')),
            ('\t"a"\t,\t"b"\t', ('"a"', '"b"')),
        ],
    )
    def test_parse(self, value: str, tags: tuple[str, ...] | None) -> None:
        assert EntityTags.parse("If-Match", value).tags == tags

    @pytest.mark.parametrize(
        "value", ["", " ", "abc", '"abc', 'abc"', '"a", ', '"a",,"b"', '"a"b"', 'w/"a"', '*, "a"', '\xa0"a"', '"a"\n']
    )
    def test_parse_rejects(self, value: str) -> None:
        with pytest.raises(ValidationFailed) as caught:
            EntityTags.parse("If-None-Match", value)
        assert set(caught.value.errors) == {"If-None-Match"}

    def test_match_strong(self) -> None:
        current = '"0123abcd"'
        assert EntityTags.parse("If-Match", "*").match_strong(current)
        assert EntityTags.parse("If-Match", '"0123abcd"').match_strong(current)
        assert EntityTags.parse("If-Match", '"x", "0123abcd"').match_strong(current)
        assert not EntityTags.parse("If-Match", '"x"').match_strong(current)
        assert not EntityTags.parse("If-Match", 'W/"0123abcd"').match_strong(current)
        assert not EntityTags.parse("If-Match", '"0123ABCD"').match_strong(current)

    def test_match_weak(self) -> None:
        current = '"0123abcd"'
        assert EntityTags.parse("If-None-Match", "*").match_weak(current)
        assert EntityTags.parse("If-None-Match", '"0123abcd"').match_weak(current)
        assert EntityTags.parse("If-None-Match", 'W/"0123abcd"').match_weak(current)
        assert EntityTags.parse("If-None-Match", '"x", W/"0123abcd"').match_weak(current)
        assert not EntityTags.parse("If-None-Match", '"x", W/"y"').match_weak(current)


# --- idempotency keys ----------------------------------------------------------------------------


class TestCheckIdempotencyKey:
    @pytest.mark.parametrize(
        "key", ["a", "k" * 255, "order-42", " ", "~!@#$%^&*()_+{}|:<>?", "018f2a4e-1b2c-7d3e-8f40-5a6b7c8d9e0f"]
    )
    def test_valid(self, key: str) -> None:
        assert check_idempotency_key(key) == key

    @pytest.mark.parametrize("key", ["", "k" * 256, "tab\there", "new\nline", "del\x7f", "é", "key\x00", "🔑"])
    def test_invalid(self, key: str) -> None:
        with pytest.raises(ValidationFailed) as caught:
            check_idempotency_key(key)
        assert set(caught.value.errors) == {"Idempotency-Key"}

    @given(st.text(max_size=300))
    def test_valid_iff_1_to_255_printable_ascii(self, key: str) -> None:
        valid = 1 <= len(key) <= 255 and all(" " <= char <= "~" for char in key)
        try:
            assert check_idempotency_key(key) == key
        except ValidationFailed:
            assert not valid
        else:
            assert valid


# --- request hashes ------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


def _reversed_keys(document: object) -> object:
    if isinstance(document, dict):
        return {key: _reversed_keys(document[key]) for key in reversed(list(document))}
    if isinstance(document, list):
        return [_reversed_keys(item) for item in document]
    return document


class TestCanonicalJsonHash:
    def test_key_order_and_spacing_do_not_matter(self) -> None:
        first = json.loads('{"name": "Rex", "petType": "Dog", "extra": {"a": 1, "b": [1, 2]}}')
        second = json.loads('{"extra":{"b":[1,2],"a":1},"petType":"Dog","name":"Rex"}')
        assert canonical_json_hash(first) == canonical_json_hash(second)

    def test_different_documents_differ(self) -> None:
        base = canonical_json_hash({"name": "Rex", "petType": "Dog"})
        assert base != canonical_json_hash({"name": "Rex", "petType": "Cat"})
        assert base != canonical_json_hash({"name": "Rex"})
        assert base != canonical_json_hash({"name": "Rex", "petType": "Dog", "ownerId": None})
        assert canonical_json_hash([1, 2]) != canonical_json_hash([2, 1])

    @given(_JSON)
    def test_equal_json_hashes_equally(self, document: object) -> None:
        assert canonical_json_hash(_reversed_keys(document)) == canonical_json_hash(document)
        assert canonical_json_hash(json.loads(json.dumps(document, indent=2))) == canonical_json_hash(document)
