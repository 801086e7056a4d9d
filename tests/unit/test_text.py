"""Text rules: names, free text and the key text is matched and sorted by."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.text import clean_name, clean_prose, match_key


class TestCleanName:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [("  Rex  ", "Rex"), ("Rex\u200d", "Rex\u200d"), ("\u200bRex", "\u200bRex"), ("שלום\u200f", "שלום\u200f")],
    )
    def test_valid(self, value: str, expected: str) -> None:
        assert clean_name(value, max_length=100) == (expected, None)

    @pytest.mark.parametrize("value", ["\u200b", "\ufeff\u200b", "\u180e", "\u3164", "\u2800", "\ufe0f", "\U000e0041"])
    def test_only_invisible_characters_is_refused(self, value: str) -> None:
        name, problem = clean_name(value, max_length=100)
        assert name is None
        assert problem is not None
        assert "visible" in problem

    @pytest.mark.parametrize("control", ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2069"])
    def test_bidirectional_controls_are_refused_anywhere(self, control: str) -> None:
        for value in (control + "Rex", "Re" + control + "x", "Rex" + control):
            assert clean_name(value, max_length=100)[0] is None

    def test_length_counts_code_points_after_trimming(self) -> None:
        assert clean_name(" " + "a" * 100 + " ", max_length=100) == ("a" * 100, None)
        assert clean_name("a" * 101, max_length=100)[0] is None


class TestCleanProse:
    @pytest.mark.parametrize(
        ("value", "expected"), [(None, None), ("", None), ("  \n\t ", None), (" a\nb\tc ", "a\nb\tc")]
    )
    def test_blank_is_none_and_line_feeds_and_tabs_stay(self, value: str | None, expected: str | None) -> None:
        assert clean_prose(value, max_length=10) == (expected, None)

    @pytest.mark.parametrize("value", ["a\rb", "a\x00", "a\x85b", 5, ["a"], "a" * 11])
    def test_refused(self, value: object) -> None:
        text, problem = clean_prose(value, max_length=10)
        assert text is None
        assert problem is not None


class TestMatchKey:
    def test_both_unicode_forms_have_one_key(self) -> None:
        assert match_key("Cafe\u0301") == match_key("CAF\u00c9") == "caf\u00e9"

    @given(st.text(max_size=30))
    def test_the_key_keeps_the_length_of_the_composed_text(self, text: str) -> None:
        assert len(match_key(text)) == len(unicodedata.normalize("NFC", text))

    @given(st.text(max_size=30))
    def test_the_key_is_stable(self, text: str) -> None:
        assert match_key(match_key(text)) == match_key(text)
