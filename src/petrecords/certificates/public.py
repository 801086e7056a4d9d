"""The public answers of certificates, open to anyone without a token: `GET /public/certificates/{token}` in four
forms, chosen by `Accept` (JSON by default, PDF, the HTML page, the JWS), and `GET /.well-known/jwks.json`, the keys
that verify the JWS.

What each request costs, in order: the per-address rate limit (a flooded address is answered 429 with no database read);
a token that this service could not have made is 404 with none either; any other token costs one statement (reads.LINK,
alone: on SQLite without a transaction, see SqlStore.lookup), which probes the unique digest index of the live and of
the revoked links: 404 unknown, 410 revoked or expired. For a live link the same statement reads what vouches for its
facts (the certificate's, the pet's and the pet's doses' revisions) and the certificate's document as the database keeps
it (see stored.py): a link answered lately by this process whose vouch has not moved is answered from what the process
kept (see recent.py), any other whose kept document was made at that vouch from that document, with nothing more read.
On SQLite a link kept costs not even that statement while its connection tells that nothing was written since the vouch
last held (Store.unread_data_version). Otherwise (a document missing, or made stale by a write) one read transaction
reads the link again with its pet (reads.LINK_RECORD) and the pet's doses with their vaccines, the facts are made, and
the document is kept again. Every answer, a failure too, is `no-store` and `no-referrer`: a link's answer must stay in
no cache, and the page must hand its address (the token) to no one.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import hashlib
import logging
import uuid
from typing import Any

import msgspec

from petrecords.certificates.addresses import TrustedProxies, create_public_rate_limit
from petrecords.certificates.facts import STATES, CertificateFacts, encode_facts
from petrecords.certificates.links import TOKEN_LENGTH, digest_of, matches, well_formed
from petrecords.certificates.page import CONTENT_SECURITY_POLICY, render_page
from petrecords.certificates.reads import Found, completed_doses, find_link, look_up_link
from petrecords.certificates.recent import Kept, RecentCertificates
from petrecords.certificates.resource import PET_CERTIFICATES, Groups
from petrecords.certificates.signing import Signer, load_signer
from petrecords.certificates.stored import keep_document, made, stored_answer
from petrecords.endpoints import JSON, Access, Answer, Call, Endpoint
from petrecords.errors import DatabaseUnavailable, LinkGone, NotFound, RateLimited, ServiceError
from petrecords.http import error_answer
from petrecords.openapi import DocumentContext, error_response, parameter
from petrecords.responses import answer_failure
from petrecords.services import Services
from petrecords.values import format_timestamp, now_ms

PDF = "application/pdf"
HTML = "text/html"
JOSE = "application/jose"
FORMS = (JSON, PDF, HTML, JOSE)
COMPACT_JWS_PATTERN = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"
PDF_CACHE_ENTRIES = 32
"""PDFs each worker keeps (each some tens of KiB): see PrintedCertificates."""
PRINTED_INSTANT = len("2026-11-21T16:06")
"""How much of `asOf` a PDF prints: to the minute (labels.instant)."""
PUBLIC_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
TAG = PET_CERTIFICATES.name
logger = logging.getLogger("petrecords.certificates")


def chosen_form(accept: str | None) -> str:
    """The form an `Accept` header asks for: the first of PDF, HTML and JWS it names with a quality above zero, in
    its order of preference; JSON otherwise (any other `Accept`, or none)."""
    if not accept:
        return JSON
    ranked: list[tuple[float, int, str]] = []
    for position, item in enumerate(accept.split(",")[:32]):
        media, _, parameters = item.partition(";")
        media = media.strip().lower()
        quality = 1.0
        for named in parameters.split(";"):
            name, _, value = named.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = 0.0
        if media in FORMS and quality > 0:
            ranked.append((-quality, position, media))
    return min(ranked)[2] if ranked else JSON


class PublicCertificates:
    """The handlers of the public paths, for one application."""

    def __init__(self, services: Services, signer: Signer | None) -> None:
        self.services = services
        settings = services.settings
        self._proxies = TrustedProxies(settings.trusted_proxies)
        self._limiter = create_public_rate_limit(per_minute=settings.public_rate_limit, redis_url=settings.redis_url)
        self._pdfs = PrintedCertificates()
        self._recent = RecentCertificates()
        self._signer = signer
        self._due_soon_days = settings.due_soon_days

    @property
    def signer(self) -> Signer:
        """The application's (see public_endpoints); loaded on first use where none was given."""
        if self._signer is None:
            self._signer = load_signer(self.services.settings)
        return self._signer

    async def _within_rate(self, call: Call) -> None:
        if self._limiter is None:
            return
        peer = call.peer
        forwarded = [bytes(value).decode("latin-1") for key, value in call.headers if key == b"x-forwarded-for"]
        retry_after = await self._limiter.hit(self._proxies.client_of(peer, forwarded))
        if retry_after is not None:
            raise RateLimited(retry_after)

    async def certificate(self, call: Call) -> Answer:
        try:
            await self._within_rate(call)
            answer = await self._answer(call.params["token"], chosen_form(call.header(b"accept")))
        except Exception as exc:  # answered here, as everywhere else, but with the public headers
            answer = error_answer(answer_failure(exc, call.state))
        answer.headers = {**answer.headers, **PUBLIC_HEADERS}
        return answer

    async def _answer(self, token: str, form: str) -> Answer:
        if not well_formed(token):
            raise NotFound()
        digest = digest_of(token)
        store = self.services.store
        # Read before the link's vouch, which it is to vouch for in turn; only for a link kept, which only its token
        # can have put there: a guessed token costs the one lookup.
        data_version = store.unread_data_version() if digest in self._recent else None
        if data_version is not None:
            found = self._recent.unchanged(digest, data_version=data_version, now_ms=(now := now_ms()))
            if found is not None:
                return await self._kept_answer(found, now, form)
        link = _live(digest, await look_up_link(store, digest), now := now_ms())
        found = self._recent.get(digest, version=link.vouch, now_ms=now, data_version=data_version)
        if found is None and link.vouch is not None:
            # The document kept in the database, read in the same statement as the vouch it must match.
            found = stored_answer(link.vouch, link.stored, due_soon_days=self._due_soon_days, now_ms=now)
            if found is not None:
                self._recent.keep(digest, found, data_version=data_version)
        if found is not None:
            return await self._kept_answer(found, now, form)
        return await self._form(await self._facts(digest), form)

    async def _kept_answer(self, found: Kept, now: int, form: str) -> Answer:
        as_of = format_timestamp(now)
        if form == JSON:
            return Answer(200, found.json_as_of(as_of))
        if form == JOSE:
            return Answer(200, self.signer.sign(found.json_as_of(as_of)).encode("ascii"), media_type=JOSE)
        return await self._form(found.facts_as_of(as_of), form)

    async def _facts(self, digest: str) -> CertificateFacts:
        store = self.services.store
        data_version = store.unread_data_version()
        # The link again, in the transaction that reads the doses: what vouches for the facts is then of the same
        # state of the data as the rows they are made from.
        async with store.transaction(write=False) as tx:
            link = _live(digest, await find_link(tx, digest), now := now_ms())
            if link.pet is None or link.vouch is None or link.id is None:
                raise LinkGone()
            doses = await completed_doses(tx, link.pet["id"])
        days = self._due_soon_days
        answer = made(
            version=link.vouch,
            certificate_id=link.id,
            issued_at_ms=link.created_at_ms,
            expires_at_ms=link.expires_at_ms,
            groups=None if link.groups is None else Groups().show(link.groups),
            pet=link.pet,
            doses=doses,
            now_ms=now,
            due_soon_days=days,
        )
        await self._keep_document(link.id, link.vouch, answer)
        self._recent.keep(digest, answer, data_version=data_version)
        return answer.facts_as_of(format_timestamp(now))

    async def _keep_document(self, certificate_id: uuid.UUID, vouch: tuple[Any, ...], answer: Kept) -> None:
        """Keep the document made for the next first read, in a write of its own: a write committed meanwhile has
        moved the vouch the next read compares it with, so that what is kept here is then not served. A failure
        leaves the next read to make it again, and is no reason to fail this one."""
        try:
            async with self.services.store.transaction(write=True) as tx:
                await keep_document(tx, certificate_id, vouch, answer, due_soon_days=self._due_soon_days)
        except Exception:  # the answer is made: it is given whatever became of the copy
            logger.warning("a certificate's document could not be kept", exc_info=True)

    async def _form(self, facts: CertificateFacts, form: str) -> Answer:
        if form == PDF:
            return Answer(200, await self._pdfs.document(facts), media_type=PDF)
        if form == HTML:
            page = render_page(facts).encode()
            headers = {"Content-Security-Policy": CONTENT_SECURITY_POLICY}
            return Answer(200, page, headers, media_type=HTML)
        payload = encode_facts(facts)
        if form == JOSE:
            return Answer(200, self.signer.sign(payload).encode("ascii"), media_type=JOSE)
        return Answer(200, payload)

    async def jwks(self, call: Call) -> Answer:
        try:
            await self._within_rate(call)
            answer = Answer(200, self.signer.jwks_document, media_type="application/jwk-set+json")
        except Exception as exc:
            answer = error_answer(answer_failure(exc, call.state))
        answer.headers = {**answer.headers, **PUBLIC_HEADERS}
        return answer


class PrintedCertificates:
    """The PDFs made last, by what they print: a PDF shows the facts with `asOf` to the minute, so two answers of
    one minute whose facts agree (nothing written in between, no state changed) are the same document, and the
    second costs a lookup instead of a render (about 12 ms of processor). Any write that changes what a
    certificate shows changes its facts, and so their key: nothing stale is ever served. Requests that ask for one
    document while it is being made wait for it, instead of each making it: a link asked for by many at once (or by
    many right after a write) costs one render, not one a request (the first in a process also loads the fonts)."""

    def __init__(self, entries: int = PDF_CACHE_ENTRIES) -> None:
        self._entries = entries
        self._made: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
        self._making: dict[bytes, asyncio.Future[bytes]] = {}

    async def document(self, facts: CertificateFacts) -> bytes:
        printed = msgspec.structs.replace(facts, as_of=facts.as_of[:PRINTED_INSTANT])
        key = hashlib.sha256(encode_facts(printed)).digest()
        made = self._made.get(key)
        if made is not None:
            self._made.move_to_end(key)
            return made
        making = self._making.get(key)
        if making is not None:
            return await asyncio.shield(making)
        making = asyncio.ensure_future(self._render(facts))
        self._making[key] = making
        # Kept when made, whether or not the request that began it is still waiting.
        making.add_done_callback(functools.partial(self._made_one, key))
        return await asyncio.shield(making)

    def _made_one(self, key: bytes, making: asyncio.Future[bytes]) -> None:
        if self._making.get(key) is making:
            del self._making[key]
        if making.cancelled() or making.exception() is not None:
            return  # each waiting request answers the failure; the next one tries again
        self._made[key] = making.result()
        if len(self._made) > self._entries:
            self._made.popitem(last=False)

    @staticmethod
    async def _render(facts: CertificateFacts) -> bytes:
        # Imported here: fpdf2 and the fonts load only where a PDF is made (see the package's note).
        from petrecords.certificates.document import render_pdf

        # A document takes milliseconds of processor: out of the event loop, which other requests share.
        return await asyncio.get_running_loop().run_in_executor(_rendering(), render_pdf, facts)


_renderer: concurrent.futures.ThreadPoolExecutor | None = None


def _rendering() -> concurrent.futures.ThreadPoolExecutor:
    """The process's one thread that makes PDFs. One is enough, for a document is Python that holds the
    interpreter's lock; and a thread keeps what it parsed of the fonts and what it encoded (document.py): every
    thread of asyncio's default pool kept its own, parsed in turn by the first documents each made."""
    global _renderer
    if _renderer is None:
        _renderer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="certificate-pdf")
    return _renderer


def _live(digest: str, link: Found | None, now: int) -> Found:
    """The link of a token's digest, when it is live: 404 for none, 410 for a revoked or expired one."""
    if link is None or not matches(digest, link.token_digest):
        raise NotFound()
    if link.revoked or link.expires_at_ms <= now:
        raise LinkGone()
    return link


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    """A JSON Schema with each `$ref` to one of `definitions` replaced by the definition itself."""
    if isinstance(schema, dict):
        reference = schema.get("$ref")
        if isinstance(reference, str):
            return _inlined(definitions[reference.rsplit("/", 1)[-1]], definitions)
        return {name: _inlined(value, definitions) for name, value in schema.items()}
    if isinstance(schema, list):
        return [_inlined(value, definitions) for value in schema]
    return schema


def _closed(schema: dict[str, Any]) -> None:
    """Each object of the certificate's JSON says it holds its members and nothing else (section 16)."""
    if "properties" in schema:
        schema["additionalProperties"] = False
        for member in schema["properties"].values():
            _closed(member)
    if "items" in schema:
        _closed(schema["items"])


def _facts_schema() -> dict[str, Any]:
    (root,), definitions = msgspec.json.schema_components([CertificateFacts])
    schema: dict[str, Any] = _inlined(root, definitions)
    _closed(schema)
    schema["properties"]["vaccinations"]["items"]["properties"]["state"] = {"type": "string", "enum": list(STATES)}
    schema["description"] = (
        "Exactly what a certificate shows: the pet, and every completed dose of the groups it names, oldest first, "
        "each with its group's state (the latest dose's: overdue, due-soon, current or deceased; superseded for an "
        "earlier one). `issuedAt` is the certificate's createdAt; `asOf` the time of the answer."
    )
    return schema


FACTS_SCHEMA = _facts_schema()
_PUBLIC_RESPONSE_HEADERS = {
    "Cache-Control": {"description": "`no-store`.", "schema": {"type": "string", "const": "no-store"}},
    "Referrer-Policy": {"description": "`no-referrer`.", "schema": {"type": "string", "const": "no-referrer"}},
}


def _failures(*failures: type[ServiceError]) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for failure in failures:
        answer = error_response(failure, private=False)
        answer["headers"] = {**answer["headers"], **_PUBLIC_RESPONSE_HEADERS}
        answers[str(failure.status)] = answer
    return answers


def _certificate_document(context: DocumentContext) -> dict[str, Any]:
    settings = context.settings
    return {
        "security": [],
        "description": "A certificate as its link shows it, from the records as they are now, to anyone who holds "
        "the link (no token). `Accept` chooses the form: `application/json` (the default, and the answer to any "
        "other Accept), `application/pdf`, `text/html` (a page a phone shows well, with no script and nothing "
        "loaded from another origin: its Content-Security-Policy says so), or `application/jose` (the JSON as a "
        "compact JWS, EdDSA or ES256 with `kid`, verifiable with the keys at `/.well-known/jwks.json`). "
        f"Rate-limited per client address ({settings.public_rate_limit} a minute; the address is the peer's, or, "
        "behind a trusted proxy, the right-most X-Forwarded-For entry that is not one), before anything else. "
        "An unknown token is 404, a revoked or expired one 410. The JSON holds no e-mail address, no notes.",
        "parameters": [
            parameter(
                "token",
                {"type": "string", "pattern": f"^[A-Za-z0-9_-]{{{TOKEN_LENGTH}}}$"},
                "The link's token: 256 random bits, never logged.",
                where="path",
                required=True,
            ),
            parameter(
                "Accept",
                {"type": "string"},
                "application/json (default), application/pdf, text/html or application/jose.",
                where="header",
            ),
        ],
        "responses": {
            "200": {
                "description": "The certificate.",
                "headers": {**_PUBLIC_RESPONSE_HEADERS},
                "content": {
                    JSON: {"schema": FACTS_SCHEMA},
                    PDF: {"schema": {"type": "string", "format": "binary"}},
                    HTML: {"schema": {"type": "string"}},
                    JOSE: {"schema": {"type": "string", "pattern": COMPACT_JWS_PATTERN}},
                },
            },
            **_failures(NotFound, LinkGone, RateLimited, DatabaseUnavailable),
        },
    }


def _jwks_document(context: DocumentContext) -> dict[str, Any]:
    return {
        "security": [],
        "description": "The public keys that verify certificates' JWS (RFC 7517): the current key first, then the "
        "previous ones (PETRECORDS_SIGNING_PREVIOUS_KEYS) until the certificates they signed have expired. "
        "Rate-limited per client address, as the certificates are.",
        "responses": {
            "200": {
                "description": "The key set.",
                "headers": {**_PUBLIC_RESPONSE_HEADERS},
                "content": {"application/jwk-set+json": {"schema": {"type": "object", "required": ["keys"]}}},
            },
            **_failures(RateLimited),
        },
    }


def public_endpoints(services: Services, signer: Signer | None = None) -> list[Endpoint]:
    """`GET /public/certificates/{token}` and `GET /.well-known/jwks.json`: no token. An application passes its
    `signer`, loaded (or made, on first start) as it starts; the document alone needs none, and makes no key."""
    public = PublicCertificates(services, signer)
    return [
        Endpoint(
            "GET",
            "/public/certificates/{token}",
            "getPublicCertificate",
            TAG,
            "A certificate, as its link shows it to anyone (JSON, PDF, HTML page or JWS)",
            public.certificate,
            _certificate_document,
            access=Access.OPEN,
        ),
        Endpoint(
            "GET",
            "/.well-known/jwks.json",
            "getCertificateKeys",
            TAG,
            "The keys that verify certificates' JWS",
            public.jwks,
            _jwks_document,
            access=Access.OPEN,
        ),
    ]
