"""Rules for the text that clients send: white space, control characters, invisible and spoofing characters.

The sets are written out rather than read from `unicodedata`, whose tables change with the Python version:
the service and its OpenAPI document must accept the same names on every supported Python.
"""

from __future__ import annotations

import re
import unicodedata

# C0, DEL and C1, as the body of a regular expression character class.
CONTROL_CHARACTERS = r"\x00-\x1f\x7f-\x9f"
# The Unicode White_Space property. (str.strip() would also take U+001C–U+001F, which are controls.)
WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# Unicode's Default_Ignorable_Code_Point property (what renders as nothing: zero-width spaces and joiners, the
# byte order mark, the Mongolian vowel separator, variation selectors, Hangul fillers, tags), plus the blank
# Braille pattern, as the body of a character class.
INVISIBLE_CHARACTERS = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u2800"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
# Explicit embeddings, overrides and isolates (RFC 9839 calls them "problematic"): text after one of them can be
# shown in another order than it is stored, so a name could pass for another one in every list that shows it.
BIDI_CONTROLS = "\u202a-\u202e\u2066-\u2069"

_FORBIDDEN_IN_NAME = re.compile(f"[{CONTROL_CHARACTERS}\ud800-\udfff{BIDI_CONTROLS}]")
_VISIBLE = re.compile(f"[^{WHITE_SPACE}{INVISIBLE_CHARACTERS}{CONTROL_CHARACTERS}]")
_FORBIDDEN_IN_PROSE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL = re.compile(f"[{CONTROL_CHARACTERS}]")
PROSE_CONTROLS = "\t\n"
"""The control characters that free text (a description, notes) keeps."""


def has_forbidden_pattern_characters(pattern: str, *, kept: str = "") -> bool:
    """Whether a `name`/`search` filter has a character that no stored text can contain: a control character
    other than those the searched text may keep."""
    return any(char not in kept for char in _CONTROL.findall(pattern))


def clean_name(value: object, *, max_length: int) -> tuple[str | None, str | None]:
    """(name, None) when `value` is a valid name, else (None, what was expected).

    A name is trimmed of white space at both ends, then has 1 to `max_length` code points, no control
    characters, no bidirectional embedding, override or isolate, and at least one visible character.
    """
    if not isinstance(value, str):
        return None, "must be a string."
    name = value.strip(WHITE_SPACE)
    if not 1 <= len(name) <= max_length:
        return None, f"must be 1 to {max_length} characters long after trimming white space."
    if _FORBIDDEN_IN_NAME.search(name):
        return None, "must not contain control characters or bidirectional overrides, embeddings or isolates."
    if _VISIBLE.search(name) is None:
        return None, "must contain a visible character (not only zero-width or other invisible characters)."
    return name, None


def clean_prose(value: object, *, max_length: int) -> tuple[str | None, str | None]:
    """(text or None, None) when `value` is valid free text, else (None, what was expected).

    Trimmed of white space at both ends; empty, blank or null is None; at most `max_length` code points;
    no control characters but line feed and tab.
    """
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, "must be a string or null."
    text = value.strip(WHITE_SPACE)
    if len(text) > max_length:
        return None, f"must be at most {max_length} characters long after trimming white space."
    if _FORBIDDEN_IN_PROSE.search(text):
        return None, "must not contain control characters other than line feed and tab."
    return text or None, None


def match_key(text: str) -> str:
    """The form in which text is sorted and matched: canonically composed (NFC), then each code point
    lower-cased on its own, keeping those whose lower case is longer.

    Context-free and length-preserving, unlike str.lower() (final sigma, dotted I), so that a name and
    every part of it fold alike, which `search` and `name` patterns need; and the same whether a client
    sent "é" as one code point or as "e" and a combining accent.
    """
    if text.isascii():
        return text.lower()
    composed = unicodedata.normalize("NFC", text)
    return "".join(lowered if len(lowered := char.lower()) == 1 else char for char in composed)
