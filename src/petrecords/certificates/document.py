"""A certificate as a PDF: one A4 page in landscape (more only when the doses need them), laid out as a border
officer expects one: the title, the certificate's id and dates, the pet with its chip, and a table of the doses.

Made with fpdf2 and fonts shipped in the package (`fonts/`, their licences beside them), so that a name in any
script prints: Noto Sans for Latin, Greek and Cyrillic, Noto Sans Arabic, Hebrew and Devanagari, and Droid Sans
Fallback for Chinese, Japanese and Korean. A document embeds only the fonts its text needs, each cut down to the
glyphs it uses (and, for Noto Sans, the common ones: below); right-to-left and Devanagari text is shaped with
HarfBuzz, which the other text does without.

Parsing a font costs far more than a page: each thread parses each font once, and every document it makes after
that takes a copy of what was parsed (see `_Fonts`). Cutting and compressing a font cost a third of a page of fifty
doses: Noto Sans is embedded with every glyph of printable ASCII, Latin-1 and punctuation whether a document uses them
or not (16 KiB more), so that the font a document embeds is, for nearly every certificate, one that its thread has
already cut and compressed, and kept.
"""

from __future__ import annotations

import copy
import functools
import threading
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fpdf import FPDF
from fpdf.enums import Align, PDFResourceType
from fpdf.fonts import Glyph, SubsetMap, TTFFont
from fpdf.output import CIDSystemInfo, OutputProducer, PDFFont, _cid_font_widths
from fpdf.syntax import Name, PDFArray, PDFContentStream

from petrecords.certificates.facts import CertificateFacts
from petrecords.certificates.fontfile import GlyphCutter
from petrecords.certificates.labels import (
    DOSE_COLUMNS,
    TITLE,
    VERIFY_NOTE,
    dose_facts,
    every_text,
    pet_facts,
    validity,
)

FONTS = Path(__file__).resolve().parent / "fonts"
FAMILY = "NotoSans"
FALLBACKS = (
    ("NotoSansArabic", "NotoSansArabic-Regular.ttf"),
    ("NotoSansHebrew", "NotoSansHebrew-Regular.ttf"),
    ("NotoSansDevanagari", "NotoSansDevanagari-Regular.ttf"),
    ("DroidSansFallback", "DroidSansFallback.ttf"),
)
"""The fonts that print what Noto Sans has no glyph for, tried in this order."""
_SHAPED_SCRIPTS = ("ARABIC", "HEBREW", "DEVANAGARI")
"""Scripts whose letters change with their neighbours or run right to left: text in them needs shaping."""
# Millimetres of A4 landscape; the columns' widths in DOSE_COLUMNS' order (277 in all, the page less its margins).
_MARGIN = 10
_COLUMN_WIDTHS = (30, 24, 18, 16, 22, 22, 13, 26, 18, 52, 19, 17)
_CELL_PADDING = 1.0
_POINT_MM = 25.4 / 72
_COMMON_CHARACTERS = (0, *range(0x20, 0x7F), *range(0xA0, 0x100), *range(0x2010, 0x2028), *range(0x2030, 0x203B))
"""What Noto Sans is always embedded with: printable ASCII, Latin-1 and the general punctuation (dashes, quotes), and
the glyph of U+0000, which fpdf2 puts in every font it embeds."""
_FONT_FILES_KEPT = 16
"""Cut and compressed fonts a thread keeps, by the glyphs they hold."""
_PRINTABLE_ASCII = range(0x21, 0x7F)
_WRAPPED_KEPT = 4096
"""Texts a thread keeps wrapped."""
_OPERATORS_KEPT = 16384
"""Positioning and box operators a thread keeps written."""
_RUNS_KEPT = 4096
"""Runs of text a thread keeps encoded."""
_CODES_RENEWED_AT = 0xD800 - 0x2000
"""Codes a thread gives a font's glyphs before it starts again from none: fpdf2 writes a code as one UTF-16 unit,
below the surrogates (0xD800), and a document uses far fewer than the margin left (0x2000)."""


class _Fonts:
    """What a thread parsed of each font, once: every document takes a copy with its own record of the glyphs it
    uses, and writes the font cut down to them (see `fontfile`)."""

    def __init__(self) -> None:
        self._parsed: dict[str, TTFFont] = {}
        self._cutters: dict[str, GlyphCutter] = {}
        self._common: dict[str, frozenset[int]] = {}
        self._files: dict[tuple[str, frozenset[int]], tuple[bytes, int]] = {}
        self.covers_ascii: set[str] = set()
        """The fonts that have a glyph for every printable ASCII character."""
        self.operators: dict[tuple[float, ...], str] = {}
        """Operators that place text or draw a box, by their numbers: every document of a layout repeats them (the
        columns' edges, the rows' lines), and formatting their numbers was a fifth of a page."""
        self.runs: dict[tuple[str, str], tuple[str, dict[int, Glyph]]] = {}
        """Each run of text's operator in a font, with the glyphs it shows and their codes: the thread gives a glyph
        the same code in every document, so that a run is encoded once, not once a document."""
        self.wrapped: dict[tuple[str, float, float, bool], list[str]] = {}
        """Text wrapped in lines of a width, for the documents of the thread: a pet's doses repeat their values
        (vets, clinics, vaccines), and its certificates all of them. The lines depend on the text alone: each
        character is measured in the first font, in their fixed order, that has it."""

    def add(self, pdf: FPDF, family: str, style: str, file_name: str) -> TTFFont:
        fontkey = f"{family.lower()}{style}"
        parsed = self._parsed.get(fontkey)
        if parsed is None:
            parsed = self._parsed[fontkey] = TTFFont(pdf, FONTS / file_name, fontkey, style)
            parsed.subset = _DocumentSubset(parsed)  # the thread's codes for the font's glyphs
            self._cutters[fontkey] = GlyphCutter((FONTS / file_name).read_bytes())
            common = _COMMON_CHARACTERS if family == FAMILY else ()
            self._common[fontkey] = frozenset(parsed.glyph_ids[c] for c in common if c in parsed.glyph_ids)
            if all(code in parsed.cmap for code in _PRINTABLE_ASCII):
                self.covers_ascii.add(fontkey)
        elif len(parsed.subset) >= _CODES_RENEWED_AT:  # shaped text can give one glyph many codes
            parsed.subset = _DocumentSubset(parsed)
            self.runs.clear()
        font = TTFFont.__new__(TTFFont)
        for name in TTFFont.__slots__:
            if hasattr(parsed, name):
                object.__setattr__(font, name, getattr(parsed, name))
        font.i = len(pdf.fonts) + 1
        font.missing_glyphs = []
        font.biggest_size_pt = 0
        font.subset = _DocumentSubset(font, codes=parsed.subset)
        pdf.fonts[fontkey] = font
        return font

    def file(self, font: TTFFont, glyph_ids: Iterable[int]) -> tuple[bytes, int]:
        """The font cut down to `glyph_ids` and its common glyphs, compressed, and its length before: made once for
        each set of glyphs (while kept), which for most documents is the common glyphs alone."""
        key = (font.fontkey, self._common[font.fontkey].union(glyph_ids))
        made = self._files.get(key)
        if made is None:
            if len(self._files) >= _FONT_FILES_KEPT:
                self._files.clear()
            cut = self._cutters[font.fontkey].cut(key[1])
            made = self._files[key] = (zlib.compress(cut), len(cut))
        return made


class _DocumentSubset(SubsetMap):
    """fpdf2's record of the glyphs a document uses and of their codes, with two changes:

    - its lookups are remembered by the record alone: fpdf2's own remembers them in `functools.cache` on the class,
      keyed by the record, which keeps every document's (and the font copy it holds) for the life of the process,
      about 46 KB a PDF of 50 doses, a gigabyte in 20,000;
    - a glyph's code is the one the thread gave it (`codes`, the parsed font's record), the same in every document,
      so that a run of text is encoded once for all of them (see `_Writer._encoded`)."""

    def __init__(self, font: TTFFont, codes: SubsetMap | None = None) -> None:
        self._picked: dict[int, int | None] = {}
        self._glyphs: dict[tuple[Any, ...], Glyph | None] = {}
        self._codes = codes
        self._recorded: dict[int, Glyph] = {}
        """Glyphs recorded by their codes (`record`): keyed by a glyph, each update compared glyphs in Python."""
        super().__init__(font)  # .notdef and space, at the codes every record gives them

    # fpdf2 declares both as its cache wrappers; they are called as the methods they wrap.
    def pick(self, unicode: int) -> int | None:  # type: ignore[override]
        try:
            return self._picked[unicode]
        except KeyError:
            picked = self._picked[unicode] = _PICK(self, unicode)
            return picked

    def get_glyph(  # type: ignore[override]
        self,
        glyph: int | None = None,
        unicode: int | tuple[int, ...] | None = None,
        glyph_name: str | None = None,
        glyph_width: int | None = None,
    ) -> Glyph | None:
        key = (glyph, unicode, glyph_name, glyph_width)
        try:
            return self._glyphs[key]
        except KeyError:
            found = self._glyphs[key] = _GET_GLYPH(self, glyph, unicode, glyph_name, glyph_width)
            return found

    def pick_glyph(self, glyph: Glyph | None) -> int | None:
        if self._codes is None or glyph is None:
            return super().pick_glyph(glyph)
        code = self._char_id_per_glyph.get(glyph)
        if code is None:
            code = self._codes.pick_glyph(glyph)  # never None for a glyph
            if code is not None:
                self._char_id_per_glyph[glyph] = code
        return code

    def glyphs_of(self, text: str) -> dict[int, Glyph]:
        """The glyphs that show `text`, by their codes, recorded as used."""
        used: dict[int, Glyph] = {}
        for char in text:
            code = self.pick(ord(char))
            glyph = self.get_glyph(unicode=ord(char))
            if code is not None and glyph is not None:
                used[code] = glyph
        return used

    def record(self, used: dict[int, Glyph]) -> None:
        """Record glyphs as used, by the codes `glyphs_of` gave them."""
        self._recorded.update(used)

    def items(self) -> Iterator[tuple[Glyph | None, int]]:
        by_code: dict[int, Glyph | None] = {code: glyph for glyph, code in self._char_id_per_glyph.items()}
        by_code.update(self._recorded)  # a code is one glyph's, in every record of the thread
        for code, glyph in by_code.items():
            yield glyph, code


_PICK = SubsetMap.pick.__wrapped__
_GET_GLYPH = SubsetMap.get_glyph.__wrapped__


class _CutFonts(OutputProducer):
    """fpdf2's output, but for the fonts: each is embedded cut down by `GlyphCutter`, with the same objects as fpdf2
    writes for a TrueType font (a Type0 font over a CIDFontType2 whose codes map to the font's own glyph ids)."""

    def _add_fonts(self, *resources: Any) -> dict[int, Any]:
        fonts = _fonts()
        added: dict[int, Any] = {}
        for font in sorted(self.fpdf.fonts.values(), key=lambda font: font.i):
            if not isinstance(font, TTFFont):
                raise TypeError(f"{font!r} is not one of the certificate's fonts")
            added[font.i] = self._add_font(font, fonts)
        return added

    def _add_font(self, font: TTFFont, fonts: _Fonts) -> PDFFont:
        name = f"MPDFAA+{font.name}"
        used = [(glyph, code) for glyph, code in font.subset.items() if glyph is not None]
        composite = PDFFont(subtype="Type0", base_font=name, encoding="Identity-H")
        self._add_pdf_obj(composite, "fonts")
        widths = _cid_font_widths({code: glyph.glyph_width for glyph, code in used})
        cid_font = PDFFont(subtype="CIDFontType2", base_font=name, d_w=font.desc.missing_width, w=widths)
        self._add_pdf_obj(cid_font, "fonts")
        composite.descendant_fonts = PDFArray([cid_font])
        composite.to_unicode = PDFContentStream(_to_unicode(used).encode("latin-1"))
        self._add_pdf_obj(composite.to_unicode, "fonts")
        cid_font.c_i_d_system_info = CIDSystemInfo()
        self._add_pdf_obj(cid_font.c_i_d_system_info, "fonts")
        descriptor = copy.copy(font.desc)  # the parsed font's is shared by every document
        descriptor.font_name = Name(name)
        self._add_pdf_obj(descriptor, "fonts")
        cid_font.font_descriptor = descriptor
        code_to_glyph = bytearray(2 * (max((code for _, code in used), default=0) + 1))
        for glyph, code in used:
            code_to_glyph[2 * code : 2 * code + 2] = glyph.glyph_id.to_bytes(2, "big")
        cid_font.c_i_d_to_g_i_d_map = PDFContentStream(contents=bytes(code_to_glyph), compress=True)
        self._add_pdf_obj(cid_font.c_i_d_to_g_i_d_map, "fonts")
        file = _CompressedFontFile(*fonts.file(font, (glyph.glyph_id for glyph, _ in used)))
        self._add_pdf_obj(file, "fonts")
        descriptor.font_file2 = file  # type: ignore[attr-defined]
        return composite


class _CompressedFontFile(PDFContentStream):
    """An embedded font file compressed beforehand: what fpdf2's PDFFontStream writes, without compressing it
    again for every document."""

    def __init__(self, compressed: bytes, length: int) -> None:
        super().__init__(contents=compressed)
        self.filter = Name("FlateDecode")
        self.length1 = length


def _to_unicode(used: list[tuple[Any, int]]) -> str:
    """The CMap that gives each code its text, so that the PDF's text can be searched and copied."""
    entries = []
    for glyph, code in used:
        if isinstance(glyph.unicode, tuple) and glyph.unicode:
            text = "".join(chr(point) for point in glyph.unicode).encode("utf-16-be").hex().upper()
            entries.append(f"<{code:04X}> <{text}>\n")
    blocks = "".join(
        f"{len(entries[start : start + 100])} beginbfchar\n{''.join(entries[start : start + 100])}endbfchar\n"
        for start in range(0, len(entries), 100)
    )
    return (
        "/CIDInit /ProcSet findresource begin\n12 dict begin\nbegincmap\n"
        "/CIDSystemInfo\n<</Registry (Adobe)\n/Ordering (UCS)\n/Supplement 0\n>> def\n"
        "/CMapName /Adobe-Identity-UCS def\n/CMapType 2 def\n1 begincodespacerange\n<0000> <FFFF>\n"
        f"endcodespacerange\n{blocks}endcmap\nCMapName currentdict /CMap defineresource pop\nend\nend"
    )


_per_thread = threading.local()


def _fonts() -> _Fonts:
    fonts: _Fonts | None = getattr(_per_thread, "fonts", None)
    if fonts is None:
        fonts = _per_thread.fonts = _Fonts()
    return fonts


def render_pdf(facts: CertificateFacts) -> bytes:
    """The PDF of a certificate."""
    texts = list(every_text(facts))
    pdf, writer = _new_document(texts)
    pdf.add_page()
    writer.line(TITLE, size=18, bold=True, height=9)
    writer.line("    ".join(f"{label}: {value}" for label, value in validity(facts)), size=9, height=5)
    pdf.ln(2)
    writer.line(facts.pet.name, size=14, bold=True, height=7)
    _pet(writer, facts)
    pdf.ln(3)
    writer.line(f"Vaccinations ({len(facts.vaccinations)})", size=11, bold=True, height=6)
    if facts.vaccinations:
        _doses(pdf, writer, facts)
    else:
        writer.line("No vaccination of the certified groups is recorded.", size=9, height=5)
    pdf.ln(3)
    for line in writer.wrap(VERIFY_NOTE, pdf.epw, size=7):
        writer.line(line, size=7, height=3.5)
    return bytes(pdf.output(output_producer_class=_CutFonts))


def _new_document(texts: Iterable[str]) -> tuple[FPDF, _Writer]:
    pdf = FPDF(orientation="L", format="A4")
    pdf.set_margins(_MARGIN, _MARGIN, _MARGIN)
    pdf.set_auto_page_break(auto=False)
    pdf.set_creator("Pet Records")
    pdf.set_title(TITLE)
    fonts = _fonts()
    regular = fonts.add(pdf, FAMILY, "", "NotoSans-Regular.ttf")
    bold = fonts.add(pdf, FAMILY, "B", "NotoSans-Bold.ttf")
    beyond_ascii = {text for text in texts if not text.isascii()}  # a certificate repeats its texts
    missing = {char for char in "".join(beyond_ascii) if ord(char) not in regular.cmap and not char.isspace()}
    fallbacks: list[TTFFont] = []
    for family, file_name in FALLBACKS:
        if not missing:
            break
        font = fonts.add(pdf, family, "", file_name)
        covered = {char for char in missing if ord(char) in font.cmap}
        if covered:
            fallbacks.append(font)
            missing -= covered
        else:
            del pdf.fonts[font.fontkey]
    if fallbacks:
        pdf.set_fallback_fonts([font.fontkey for font in fallbacks], exact_match=False)
    if any(_Writer.needs_shaping(text) for text in beyond_ascii):
        pdf.set_text_shaping(use_shaping_engine=True)
    return pdf, _Writer(pdf, regular=regular, bold=bold, fallbacks=fallbacks, fonts=fonts)


def _shaped(char: str) -> bool:
    return unicodedata.name(char, "").startswith(_SHAPED_SCRIPTS)


@functools.lru_cache(maxsize=_WRAPPED_KEPT)
def _beyond_ascii_needs_shaping(text: str) -> bool:
    # Kept: a certificate writes and wraps each of its names, clinics and vets many times.
    return any(_shaped(char) for char in text if ord(char) > 0x2FF)


class _Writer:
    """Text on the page, at the cost of the text alone.

    fpdf2's cells and tables measure and lay out every line through several layers (a thousand cells took a
    second); here a line is measured from the widths the font was parsed with, wrapped at spaces (or anywhere, for
    a word wider than its column), and written with one text operator per run of a font, a row's runs in one text
    object. Text in a script that needs shaping (Arabic, Hebrew, Devanagari) goes through fpdf2's own cells, which
    shape it with HarfBuzz and order it right to left where it runs so: slower, and only where it is needed."""

    def __init__(self, pdf: FPDF, *, regular: TTFFont, bold: TTFFont, fallbacks: list[TTFFont], fonts: _Fonts) -> None:
        self._pdf = pdf
        self._covers_ascii = fonts.covers_ascii
        self._wrapped = fonts.wrapped
        self._operators = fonts.operators
        self._regular = regular
        self._bold = bold
        self._fallbacks = fallbacks
        self._pending: list[str] = []
        self._boxes: list[str] = []
        self._font_set: tuple[int, float] | None = None
        """The font and size of the text object being written, once set in it."""
        self._listed: set[tuple[int, int]] = set()
        """The fonts listed among each page's resources."""
        self._runs_encoded = fonts.runs

    def font_of(self, char: str, primary: TTFFont) -> TTFFont:
        code = ord(char)
        if code in primary.cmap or char.isspace():
            return primary
        return next((font for font in self._fallbacks if code in font.cmap), primary)

    def width(self, text: str, *, size: float, bold: bool = False) -> float:
        primary = self._bold if bold else self._regular
        if text.isascii():
            widths = primary.cw
            return sum([widths[ord(char)] for char in text]) * size / 1000 * _POINT_MM
        units = 0.0
        for char in text:
            units += self.font_of(char, primary).cw[ord(char)]
        return units * size / 1000 * _POINT_MM

    def wrap(self, text: str, width: float, *, size: float, bold: bool = False) -> list[str]:
        """`text` in lines no wider than `width` (mm)."""
        if self.needs_shaping(text):
            self._use(self._bold if bold else self._regular, size)
            shaped = self._pdf.multi_cell(width, 1, text, dry_run=True, output="LINES", padding=0)
            return [str(line) for line in shaped] or [""] if isinstance(shaped, list) else [text]
        key = (text, width, size, bold)
        wrapped = self._wrapped.get(key)
        if wrapped is None:
            if len(self._wrapped) >= _WRAPPED_KEPT:
                self._wrapped.clear()
            wrapped = self._wrapped[key] = self._wrap(text, width, size=size, bold=bold)
        return wrapped

    def _wrap(self, text: str, width: float, *, size: float, bold: bool) -> list[str]:
        if self.width(text, size=size, bold=bold) <= width:
            return [text]
        lines: list[str] = []
        current = ""
        for word in text.split(" "):
            candidate = f"{current} {word}" if current else word
            if self.width(candidate, size=size, bold=bold) <= width:
                current = candidate
                continue
            if current:
                lines.append(current)
            current = ""
            for char in word:  # a word wider than the column is cut where it must be
                if current and self.width(current + char, size=size, bold=bold) > width:
                    lines.append(current)
                    current = ""
                current += char
        lines.append(current)
        return lines

    @staticmethod
    def needs_shaping(text: str) -> bool:
        return not text.isascii() and _beyond_ascii_needs_shaping(text)

    def text(self, x: float, y: float, text: str, *, size: float, bold: bool = False, width: float = 0) -> None:
        """`text` on one line whose top left corner is (x, y), in mm; written by the next `flush`."""
        pdf = self._pdf
        primary = self._bold if bold else self._regular
        if self.needs_shaping(text):
            self.flush()
            self._use(primary, size)
            pdf.set_xy(x, y)
            pdf.cell(width or pdf.epw, size * _POINT_MM * 1.2, text, align=Align.L)
            return
        scale = pdf.k
        baseline = (pdf.h - y - size * _POINT_MM * 0.95) * scale
        runs = self._runs(text, primary)
        for number, (font, run) in enumerate(runs):
            if number:  # after the run before it
                before, ran = runs[number - 1]
                x += sum([before.cw[ord(char)] for char in ran]) * size / 1000 * _POINT_MM
            if (font.i, pdf.page) not in self._listed:  # once a page for each font: a set of them, for fpdf2
                self._listed.add((font.i, pdf.page))
                pdf._resource_catalog.add(PDFResourceType.FONT, font.i, pdf.page)
            if self._font_set != (font.i, size):  # the text object keeps it until another is set
                self._font_set = (font.i, size)
                self._pending.append(f"/F{font.i} {size:.2f} Tf")
            self._pending.append(self._operator(x * scale, baseline))
            self._pending.append(self._encoded(font, run))

    def _encoded(self, font: TTFFont, run: str) -> str:
        """The text operator of `run` in `font`, its glyphs recorded as used by the document."""
        subset = font.subset
        if not isinstance(subset, _DocumentSubset) or font.is_symbol:
            return font.encode_text(run)
        key = (font.fontkey, run)
        found = self._runs_encoded.get(key)
        if found is None:
            if len(self._runs_encoded) >= _RUNS_KEPT:
                self._runs_encoded.clear()
            found = self._runs_encoded[key] = (font.encode_text(run), subset.glyphs_of(run))
        else:
            subset.record(found[1])
        return found[0]

    def _runs(self, text: str, primary: TTFFont) -> list[tuple[TTFFont, str]]:
        """`text` cut where the font that prints it changes: most text of a certificate is one run of `primary`."""
        if text.isascii() and text.isprintable() and primary.fontkey in self._covers_ascii:
            return [(primary, text)]
        runs = []
        start = 0
        while start < len(text):
            font = self.font_of(text[start], primary)
            end = start + 1
            while end < len(text) and self.font_of(text[end], primary) is font:
                end += 1
            runs.append((font, text[start:end]))
            start = end
        return runs

    def box(self, x: float, y: float, width: float, height: float, *, filled: bool) -> None:
        """A cell's border (and its fill, in the fill colour), written by the next `flush` under its text."""
        pdf = self._pdf
        scale = pdf.k
        self._boxes.append(self._operator(x * scale, (pdf.h - y) * scale, width * scale, -height * scale, filled))

    def _operator(self, *numbers: float) -> str:
        """A text's position (x, y) or a box (x, y, width, height, filled) as its operator."""
        written = self._operators.get(numbers)
        if written is None:
            if len(self._operators) >= _OPERATORS_KEPT:
                self._operators.clear()
            if len(numbers) == 2:
                written = f"1 0 0 1 {numbers[0]:.2f} {numbers[1]:.2f} Tm"
            else:
                x, y, width, height, filled = numbers
                written = f"{x:.2f} {y:.2f} {width:.2f} {height:.2f} re {'B' if filled else 'S'}"
            self._operators[numbers] = written
        return written

    def flush(self) -> None:
        """Write the boxes noted since the last flush, then the text, in black, as one text object."""
        if self._boxes:
            self._pdf._out(" ".join(self._boxes))
            self._boxes.clear()
        if self._pending:
            self._pdf._out(f"q 0 g BT {' '.join(self._pending)} ET Q")
            self._pending.clear()
            self._font_set = None

    def line(self, text: str, *, size: float, height: float, bold: bool = False) -> None:
        """A line of its own at the left margin, then down by `height`."""
        pdf = self._pdf
        self.text(pdf.l_margin, pdf.y, text, size=size, bold=bold)
        self.flush()
        pdf.set_xy(pdf.l_margin, pdf.y + height)

    def _use(self, font: TTFFont, size: float) -> None:
        # A font's key is its family in lower case, then its style; only Noto Sans has a bold one here.
        if font is self._bold:
            self._pdf.set_font(FAMILY, "B", size)
        else:
            self._pdf.set_font(font.fontkey, "", size)


def _pet(writer: _Writer, facts: CertificateFacts) -> None:
    pdf = writer._pdf
    pairs = pet_facts(facts.pet)
    column_width = pdf.epw / 3
    label_width = 27
    top = pdf.y
    rows = -(-len(pairs) // 3)
    for index, (label, value) in enumerate(pairs):
        x = pdf.l_margin + (index // rows) * column_width
        y = top + (index % rows) * 4.6
        value_width = column_width - label_width - 2
        writer.text(x, y, label, size=8)
        writer.text(x + label_width, y, writer.wrap(value, value_width, size=8, bold=True)[0], size=8, bold=True)
    writer.flush()
    pdf.set_xy(pdf.l_margin, top + rows * 4.6)


_LINE = 3.2  # mm, a line of 7 pt text in the table
_TABLE_SIZE = 7


def _doses(pdf: FPDF, writer: _Writer, facts: CertificateFacts) -> None:
    bottom = pdf.h - pdf.b_margin

    def row(values: list[str], *, heading: bool) -> None:
        wrapped = [
            writer.wrap(value, width - 2 * _CELL_PADDING, size=_TABLE_SIZE, bold=heading)
            for value, width in zip(values, _COLUMN_WIDTHS, strict=True)
        ]
        height = max(len(lines) for lines in wrapped) * _LINE + 2 * _CELL_PADDING
        if pdf.y + height > bottom:
            pdf.add_page()
            row(list(DOSE_COLUMNS), heading=True)
        x, y = pdf.l_margin, pdf.y
        for lines, width in zip(wrapped, _COLUMN_WIDTHS, strict=True):
            writer.box(x, y, width, height, filled=heading)
            for number, line in enumerate(lines):
                writer.text(
                    x + _CELL_PADDING,
                    y + _CELL_PADDING + number * _LINE,
                    line,
                    size=_TABLE_SIZE,
                    bold=heading,
                    width=width - 2 * _CELL_PADDING,
                )
            x += width
        writer.flush()
        pdf.set_xy(pdf.l_margin, y + height)

    pdf.set_draw_color(160, 167, 175)
    pdf.set_fill_color(234, 238, 242)
    pdf.set_line_width(0.2)
    row(list(DOSE_COLUMNS), heading=True)
    for dose in facts.vaccinations:
        row(dose_facts(dose), heading=False)
