"""The certificate as a PDF (petrecords.certificates.document), read back with pypdf: one page for a few doses, every
fact a border officer checks, and names in every script the fonts cover, as text that can be searched and copied."""

from __future__ import annotations

import gc
import io
import re
import threading

import pypdf
import pytest
from fpdf.fonts import SubsetMap

from petrecords.certificates import document
from petrecords.certificates.document import render_pdf
from petrecords.certificates.facts import CertificateFacts
from petrecords.certificates.fontfile import GlyphCutter
from petrecords.certificates.labels import dose_facts, instant, pet_facts, validity
from tests.certificates.support import DAY_MS, NOW_MS, dose_row, facts_of, many_doses, pet_row, vaccine_row

NAMES = {
    "Latin": "Zoë Łucja",
    "Greek": "Αργώ",
    "Cyrillic": "Шарик",
    "Arabic": "قطة",
    "Hebrew": "כלב",
    "Devanagari": "मोती",
    "Chinese": "小白",
    "Japanese": "ポチ",
    "Korean": "바둑이",
}


def _read(facts: CertificateFacts) -> tuple[pypdf.PdfReader, str]:
    reader = pypdf.PdfReader(io.BytesIO(render_pdf(facts)))
    return reader, "\n".join(page.extract_text() for page in reader.pages)


def _squeezed(text: str) -> str:
    """Text without white space: a cell's value may be wrapped onto lines of its own."""
    return re.sub(r"\s+", "", text)


class TestReadBack:
    def test_every_fact_on_one_page(self) -> None:
        facts = facts_of(doses=many_doses(5))
        reader, text = _read(facts)
        assert len(reader.pages) == 1
        assert reader.metadata is not None
        assert reader.metadata.title == "Certificate of vaccination"
        squeezed = _squeezed(text)
        expected = [
            "Certificate of vaccination",
            facts.pet.name,
            *(value for _, value in validity(facts)),
            *(value for _, value in pet_facts(facts.pet)),
            *(value for dose in facts.vaccinations for value in dose_facts(dose)),
        ]
        missing = [value for value in expected if _squeezed(value) not in squeezed]
        assert not missing, missing

    def test_the_chip_dates_and_states_as_written(self) -> None:
        facts = facts_of(doses=many_doses(10))
        _, text = _read(facts)
        assert "982000123456789" in text
        assert instant(facts.vaccinations[-1].due_at) in text
        assert {"superseded", "current"} <= set(text.split())

    def test_fifty_doses_take_the_pages_they_need(self) -> None:
        facts = facts_of(doses=many_doses(50))
        reader, text = _read(facts)
        assert 2 <= len(reader.pages) <= 4
        assert all("Rabies tag" in page.extract_text() for page in reader.pages)  # the headings repeat
        assert all(f"R-{number}" in text.split() for number in range(50))

    def test_no_dose_is_said(self) -> None:
        _, text = _read(facts_of(doses=[]))
        assert "No vaccination of the certified groups is recorded." in text


class TestScripts:
    @pytest.mark.parametrize("script", list(NAMES))
    def test_a_name_in_each_script_is_text(self, script: str) -> None:
        _, text = _read(facts_of(pet_row(name=NAMES[script]), doses=[]))
        # Right-to-left text is extracted in the order it was drawn, which pypdf may not reverse.
        assert NAMES[script] in text or NAMES[script][::-1] in text, text[:300]

    def test_every_script_in_one_document_and_in_the_table(self) -> None:
        vaccine = vaccine_row("Вакцина против бешенства", "Бешенство", manufacturer="株式会社 微生物化学研究所")
        dose = dose_row(NOW_MS - 30 * DAY_MS, veterinarian="ד״ר כהן", clinic="عيادة الحيوانات، دبي")
        facts = facts_of(pet_row(name=" ".join(NAMES.values())), doses=[(dose, vaccine)])
        reader, text = _read(facts)
        assert len(reader.pages) == 1
        for name in NAMES.values():
            assert name in text or name[::-1] in text, name
        assert "Вакцина" in text
        assert "株式会社" in text

    def test_fonts_are_embedded_and_cut_to_what_is_used(self) -> None:
        pdf = render_pdf(facts_of(pet_row(name="小白"), doses=[]))
        reader = pypdf.PdfReader(io.BytesIO(pdf))
        fonts = reader.pages[0]["/Resources"]["/Font"]
        names = sorted(str(font.get_object()["/BaseFont"]) for font in fonts.values())
        assert any("Droid" in name for name in names), names
        assert len(pdf) < 120_000  # a CJK font of 3.4 MB, cut to the glyphs used


class TestRepeated:
    def test_documents_made_one_after_another_are_alike(self) -> None:
        facts = facts_of(doses=many_doses(3))
        first, second = render_pdf(facts), render_pdf(facts)
        assert _read(facts)[1] == pypdf.PdfReader(io.BytesIO(second)).pages[0].extract_text()
        assert len(first) == len(second)

    def test_a_font_is_cut_once_for_every_document_in_latin_1(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuts: list[object] = []
        cut = GlyphCutter.cut
        monkeypatch.setattr(GlyphCutter, "cut", lambda self, glyphs: cuts.append(glyphs) or cut(self, glyphs))
        render_pdf(facts_of(pet_row(name="Rex"), doses=many_doses(2)))
        cuts.clear()

        other = facts_of(pet_row(name="Ñandú Größe-Çelik"), doses=many_doses(4))
        pdf = render_pdf(other)

        assert cuts == []
        assert "Ñandú Größe-Çelik" in pypdf.PdfReader(io.BytesIO(pdf)).pages[0].extract_text()
        render_pdf(facts_of(pet_row(name="Łukasz Šťastný"), doses=[]))
        assert cuts  # beyond Latin-1: a font of its own

    def test_a_run_encoded_for_another_document_is_shown_in_this_one(self) -> None:
        # The second document's text is all runs the first encoded: its fonts must still hold their glyphs.
        render_pdf(facts_of(pet_row(name="Шарик Rex"), doses=many_doses(4)))
        _, text = _read(facts_of(pet_row(name="Rex Шарик"), doses=many_doses(4)))
        assert "Rex Шарик" in text
        assert all(dose in text for dose in ("Rabies", "Nobivac")), text

    def test_a_threads_codes_start_again_before_they_run_out(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def codes_given(names: list[str]) -> int:
            """The codes a new thread has given the bold font's glyphs once it has made a document of each name."""
            given: list[int] = []

            def make() -> None:
                for name in names:
                    _, text = _read(facts_of(pet_row(name=f"{name} Ψ"), doses=many_doses(2)))
                    assert name in text or name[::-1] in text, name
                given.append(len(document._fonts()._parsed["notosansB"].subset))

            thread = threading.Thread(target=make)
            thread.start()
            thread.join()
            assert given, "the thread failed"
            return given[0]

        every = list(NAMES.values())
        monkeypatch.setattr(document, "_CODES_RENEWED_AT", 1)  # the codes start again at every document
        assert codes_given(every) == codes_given(every[-1:])

    def test_a_documents_record_of_its_glyphs_goes_with_it(self) -> None:
        # fpdf2 remembers a glyph map's lookups on its class, keyed by the map: kept there, every document's map
        # and font copy would stay in memory for the life of the server (about 46 KB a PDF).
        def made_in_every_script() -> int:
            for name in ("Rex", "小白", "Шарик", "قطة"):
                render_pdf(facts_of(pet_row(name=name), doses=many_doses(3)))
            gc.collect()
            return sum(isinstance(item, SubsetMap) for item in gc.get_objects())

        parsed = made_in_every_script()  # each font's own, parsed once by the thread
        assert [made_in_every_script() for _ in range(3)] == [parsed] * 3
