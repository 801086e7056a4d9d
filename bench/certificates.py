"""What a certificate's forms cost to make, without HTTP or a database: the facts of a pet with `--doses` doses
built from rows and encoded as JSON, signed as a JWS, rendered as a page and as a PDF, each timed alone in one
process (one core), after a first call that parses the fonts.

    .venv/bin/python bench/certificates.py --doses 50 --seconds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.certificates.support import facts_of, many_doses

from petrecords.certificates.document import render_pdf
from petrecords.certificates.facts import encode_facts
from petrecords.certificates.page import render_page
from petrecords.certificates.signing import load_signer
from petrecords.config import Settings


def _rate(name: str, work: Callable[[], object], seconds: float) -> None:
    """Wall-clock rate, and the processor time each took: on a busy machine the second says what one core can do."""
    work()
    done, started, processor = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - started) < seconds:
        work()
        done += 1
    each_ms = (time.process_time() - processor) / done * 1000
    print(f"{name:<22} {done / elapsed:8.0f}/s  {elapsed / done * 1000:8.3f} ms each, {each_ms:8.3f} ms of processor")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doses", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    doses = many_doses(args.doses)
    facts = facts_of(doses=doses)
    payload = encode_facts(facts)
    with tempfile.TemporaryDirectory() as data:
        signer = load_signer(Settings(data_dir=Path(data), _env_file=None))  # type: ignore[call-arg]
    print(f"{args.doses} doses; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    _rate("facts built + JSON", lambda: encode_facts(facts_of(doses=doses)), args.seconds)
    _rate("JWS of the JSON", lambda: signer.sign(payload), args.seconds)
    _rate("HTML page", lambda: render_page(facts), args.seconds)
    _rate("PDF", lambda: render_pdf(facts), args.seconds)


if __name__ == "__main__":
    main()
