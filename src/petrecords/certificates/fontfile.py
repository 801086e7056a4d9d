"""A TrueType font cut down to the glyphs one document uses, in about a millisecond.

fontTools' subsetter, which fpdf2 runs for every font of every document, costs 20 ms on a font of a hundred glyphs
and most of a second on a CJK font of 28,000, whatever the document: more than everything else a certificate's PDF
takes. A PDF needs much less of a font than the subsetter keeps right: the outlines of the glyphs it shows, found
by glyph id (the document maps its codes to glyph ids itself, CIDToGIDMap), and the few tables that size them. So
the glyph ids stay as they are and every other glyph is left empty: one pass over the font's bytes, once parsed.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable

_KEPT_TABLES = (b"OS/2", b"cmap", b"glyf", b"head", b"hhea", b"hmtx", b"loca", b"maxp", b"name", b"post")
"""What a PDF viewer reads of an embedded TrueType font; hinting and layout tables are left out."""
_POST_FORMAT_3 = struct.Struct(">IihhIIIII")
# Composite glyph flags (OpenType `glyf`): which fields follow each component's glyph index.
_ARGS_ARE_WORDS = 0x0001
_HAVE_SCALE = 0x0008
_MORE_COMPONENTS = 0x0020
_HAVE_X_AND_Y_SCALE = 0x0040
_HAVE_TWO_BY_TWO = 0x0080


class GlyphCutter:
    """One TrueType font, parsed once, to be cut for any number of documents."""

    def __init__(self, data: bytes) -> None:
        (count,) = struct.unpack_from(">H", data, 4)
        self._tables: dict[bytes, bytes] = {}
        for index in range(count):
            tag, _checksum, offset, length = struct.unpack_from(">4sIII", data, 12 + 16 * index)
            self._tables[tag] = data[offset : offset + length]
        if b"glyf" not in self._tables:
            raise ValueError("not a TrueType font with glyf outlines")
        head = self._tables[b"head"]
        (long_offsets,) = struct.unpack_from(">h", head, 50)
        (self.glyph_count,) = struct.unpack_from(">H", self._tables[b"maxp"], 4)
        loca = self._tables[b"loca"]
        if long_offsets:
            offsets = array("I", loca[: 4 * (self.glyph_count + 1)])
            factor = 1
        else:
            offsets = array("H", loca[: 2 * (self.glyph_count + 1)])
            factor = 2
        offsets.byteswap()  # big-endian in the file
        self._offsets = [offset * factor for offset in offsets]
        self._glyf = self._tables[b"glyf"]
        # The head table as the cut font's: long loca offsets, and no checksum adjustment, which no viewer reads.
        self._head = head[:8] + b"\0\0\0\0" + head[12:50] + struct.pack(">h", 1) + head[52:]
        post = self._tables.get(b"post", b"")
        # Format 3 keeps the italic angle, underline and fixed pitch, and names no glyph.
        self._post = _POST_FORMAT_3.pack(0x00030000, *struct.unpack_from(">ihhI", post, 4), 0, 0, 0, 0)

    def outline(self, glyph_id: int) -> bytes:
        return self._glyf[self._offsets[glyph_id] : self._offsets[glyph_id + 1]]

    def with_components(self, glyph_ids: Iterable[int]) -> set[int]:
        """`glyph_ids`, .notdef, and every glyph that a composite among them is drawn from."""
        kept: set[int] = set()
        pending = [0, *glyph_ids]
        while pending:
            glyph_id = pending.pop()
            if glyph_id in kept or not 0 <= glyph_id < self.glyph_count:
                continue
            kept.add(glyph_id)
            pending.extend(self._components(self.outline(glyph_id)))
        return kept

    @staticmethod
    def _components(outline: bytes) -> list[int]:
        if len(outline) < 10 or struct.unpack_from(">h", outline, 0)[0] >= 0:
            return []
        components = []
        position = 10
        while position + 4 <= len(outline):
            flags, component = struct.unpack_from(">HH", outline, position)
            components.append(component)
            position += 4 + (4 if flags & _ARGS_ARE_WORDS else 2)
            if flags & _HAVE_SCALE:
                position += 2
            elif flags & _HAVE_X_AND_Y_SCALE:
                position += 4
            elif flags & _HAVE_TWO_BY_TWO:
                position += 8
            if not flags & _MORE_COMPONENTS:
                break
        return components

    def cut(self, glyph_ids: Iterable[int]) -> bytes:
        """The font with the outlines of `glyph_ids` (and of what they are drawn from) and no other: the same glyph
        ids, the same metrics."""
        kept = self.with_components(glyph_ids)
        glyf = bytearray()
        loca = array("I", [0]) * (self.glyph_count + 1)
        for glyph_id in range(self.glyph_count):
            if glyph_id in kept:
                glyf += self.outline(glyph_id)
                glyf += b"\0" * (-len(glyf) % 4)
            loca[glyph_id + 1] = len(glyf)
        loca.byteswap()
        tables = dict(self._tables)
        tables[b"glyf"] = bytes(glyf)
        tables[b"loca"] = loca.tobytes()
        tables[b"head"] = self._head
        tables[b"post"] = self._post
        return _font_file({tag: data for tag, data in tables.items() if tag in _KEPT_TABLES})


def _font_file(tables: dict[bytes, bytes]) -> bytes:
    """A TrueType font file of `tables` (OpenType's table directory, each table 4-byte aligned and checksummed)."""
    count = len(tables)
    power = 1 << (count.bit_length() - 1)
    header = struct.pack(">IHHHH", 0x00010000, count, power * 16, power.bit_length() - 1, count * 16 - power * 16)
    directory = bytearray()
    body = bytearray()
    offset = 12 + 16 * count
    for tag in sorted(tables):
        data = tables[tag]
        padded = data + b"\0" * (-len(data) % 4)
        directory += struct.pack(">4sIII", tag, _checksum(padded), offset + len(body), len(data))
        body += padded
    return header + bytes(directory) + bytes(body)


def _checksum(padded: bytes) -> int:
    words = array("I", padded)
    words.byteswap()
    return sum(words) & 0xFFFFFFFF
