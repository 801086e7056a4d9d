"""Signing deliveries and checking them (webhooks.signing), against the Standard Webhooks specification's
published test vectors, and by properties over any body, id and timestamp."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.webhooks.signing import (
    SECRET_BYTES,
    TOLERANCE_SECONDS,
    SignatureInvalid,
    new_secret,
    secret_key,
    signature,
    signed_headers,
    verify,
)

# The vectors of the Standard Webhooks libraries' own tests (standard-webhooks/standard-webhooks):
# libraries/python/tests/test_webhooks.py (test_sign_function, and the headers of PayloadForTesting),
# libraries/javascript/src/webhook.test.ts ("sign function works", "multi sig payload is valid",
# "partial signature throws error") and libraries/go/webhook_test.go (TestWebhookSign), which share them.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
VECTOR_WRONG_SIGNATURES = (
    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=",  # python: test_invalid_signature_raises_error
    "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",  # go: "invalid signature is invalid"
    "v1,dawfeoifkpqwoekfpqoekf",  # javascript: "invalid signature throws error"
    "v1,g0hM9S",  # javascript: "partial signature throws error", its first 8 characters
    "v1,",  # javascript and go: "partial signature"
)
VECTOR_OTHER_SIGNATURES = (
    "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
    "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
)
"""The others of the libraries' "multi sig payload is valid": wrong, or of another version, beside the right one."""


def _headers(signatures: str, *, message_id: str = VECTOR_ID, timestamp: str = str(VECTOR_TIMESTAMP)) -> dict[str, str]:
    return {"webhook-id": message_id, "webhook-timestamp": timestamp, "webhook-signature": signatures}


class TestStandardWebhooksVectors:
    def test_the_signature_is_the_published_one(self) -> None:
        made = signature(VECTOR_SECRET, message_id=VECTOR_ID, timestamp=VECTOR_TIMESTAMP, body=VECTOR_BODY)
        assert made == VECTOR_SIGNATURE

    @pytest.mark.parametrize("secret", [VECTOR_SECRET, VECTOR_SECRET.removeprefix("whsec_")])
    def test_the_published_signature_checks_with_or_without_the_prefix(self, secret: str) -> None:
        verify(secret, _headers(VECTOR_SIGNATURE), VECTOR_BODY, now=VECTOR_TIMESTAMP)

    @pytest.mark.parametrize("wrong", VECTOR_WRONG_SIGNATURES)
    def test_a_wrong_signature_is_refused(self, wrong: str) -> None:
        with pytest.raises(SignatureInvalid, match="no signature"):
            verify(VECTOR_SECRET, _headers(wrong), VECTOR_BODY, now=VECTOR_TIMESTAMP)

    def test_one_right_signature_among_others_checks(self) -> None:
        signatures = " ".join([*VECTOR_OTHER_SIGNATURES, VECTOR_SIGNATURE, VECTOR_OTHER_SIGNATURES[0]])
        verify(VECTOR_SECRET, _headers(signatures), VECTOR_BODY, now=VECTOR_TIMESTAMP)

    @pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
    def test_a_missing_header_is_refused(self, missing: str) -> None:
        headers = _headers(VECTOR_SIGNATURE)
        del headers[missing]
        with pytest.raises(SignatureInvalid, match="headers are required"):
            verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TIMESTAMP)

    @pytest.mark.parametrize("timestamp", ["hello", "-1614265330", "1614265330.5", "1e9", "", "１６１４２６５３３０"])
    def test_a_timestamp_that_is_no_number_of_seconds_is_refused(self, timestamp: str) -> None:
        with pytest.raises(SignatureInvalid, match="webhook-timestamp"):
            verify(VECTOR_SECRET, _headers(VECTOR_SIGNATURE, timestamp=timestamp), VECTOR_BODY, now=VECTOR_TIMESTAMP)

    @pytest.mark.parametrize("off_by", [TOLERANCE_SECONDS + 1, -TOLERANCE_SECONDS - 1, 10**9])
    def test_a_timestamp_outside_the_tolerance_is_refused(self, off_by: int) -> None:
        with pytest.raises(SignatureInvalid, match="too far from now"):
            verify(VECTOR_SECRET, _headers(VECTOR_SIGNATURE), VECTOR_BODY, now=VECTOR_TIMESTAMP + off_by)

    @pytest.mark.parametrize("off_by", [TOLERANCE_SECONDS, -TOLERANCE_SECONDS, 0])
    def test_a_timestamp_within_the_tolerance_checks(self, off_by: int) -> None:
        verify(VECTOR_SECRET, _headers(VECTOR_SIGNATURE), VECTOR_BODY, now=VECTOR_TIMESTAMP + off_by)

    def test_header_names_are_read_whatever_their_case(self) -> None:
        headers = {name.title(): value for name, value in _headers(VECTOR_SIGNATURE).items()}
        verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TIMESTAMP)


class TestSecrets:
    def test_a_new_secret_is_the_prefix_and_32_random_bytes(self) -> None:
        made = {new_secret() for _ in range(100)}
        assert len(made) == 100
        for secret in made:
            assert secret.startswith("whsec_")
            assert len(secret_key(secret)) == SECRET_BYTES
            assert base64.b64encode(secret_key(secret)).decode() == secret.removeprefix("whsec_")

    @pytest.mark.parametrize("secret", ["", "whsec_", "whsec_not base64!", "whsec_QUJD=x", "whsec_é"])
    def test_a_malformed_secret_is_no_key(self, secret: str) -> None:
        with pytest.raises(ValueError, match="whsec_ followed by base64"):
            secret_key(secret)

    def test_an_id_with_a_full_stop_is_never_signed(self) -> None:
        """It would sign the same bytes as another id and timestamp: `a.1` at 2 and `a` at `1.2`."""
        with pytest.raises(ValueError, match="full stop"):
            signature(new_secret(), message_id="pets.1", timestamp=2, body=b"{}")


class TestRotation:
    def test_each_secret_signs_and_either_checks(self) -> None:
        current, previous = new_secret(), new_secret()
        headers = signed_headers([current, previous], message_id="pets:1:1", timestamp=100, body=b"{}")
        first, second = headers["webhook-signature"].split(" ")
        assert first == signature(current, message_id="pets:1:1", timestamp=100, body=b"{}")
        assert second == signature(previous, message_id="pets:1:1", timestamp=100, body=b"{}")
        verify(current, headers, b"{}", now=100)
        verify(previous, headers, b"{}", now=100)
        with pytest.raises(SignatureInvalid):
            verify(new_secret(), headers, b"{}", now=100)

    def test_a_delivery_is_signed_with_at_least_one_secret(self) -> None:
        with pytest.raises(ValueError, match="at least one secret"):
            signed_headers([], message_id="pets:1:1", timestamp=100, body=b"{}")


ids = st.text(st.characters(codec="ascii", exclude_characters=".", exclude_categories=["Cc"]), min_size=1)
timestamps = st.integers(min_value=0, max_value=10**11)
SECRET = new_secret()


class TestProperties:
    @given(body=st.binary(), message_id=ids, timestamp=timestamps)
    def test_what_is_signed_checks(self, body: bytes, message_id: str, timestamp: int) -> None:
        headers = signed_headers([SECRET], message_id=message_id, timestamp=timestamp, body=body)
        verify(SECRET, headers, body, now=timestamp)

    @given(body=st.binary(min_size=1), message_id=ids, timestamp=timestamps, data=st.data())
    def test_a_changed_byte_of_the_body_is_refused(
        self, body: bytes, message_id: str, timestamp: int, data: st.DataObject
    ) -> None:
        headers = signed_headers([SECRET], message_id=message_id, timestamp=timestamp, body=body)
        at = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        changed = body[:at] + bytes([body[at] ^ data.draw(st.integers(min_value=1, max_value=255))]) + body[at + 1 :]
        with pytest.raises(SignatureInvalid):
            verify(SECRET, headers, changed, now=timestamp)

    @given(body=st.binary(), message_id=ids, timestamp=timestamps, other=ids)
    def test_the_signature_binds_the_id_and_the_timestamp(
        self, body: bytes, message_id: str, timestamp: int, other: str
    ) -> None:
        headers = signed_headers([SECRET], message_id=message_id, timestamp=timestamp, body=body)
        if other != message_id:
            with pytest.raises(SignatureInvalid):
                verify(SECRET, {**headers, "webhook-id": other}, body, now=timestamp)
        with pytest.raises(SignatureInvalid):
            verify(SECRET, {**headers, "webhook-timestamp": str(timestamp + 1)}, body, now=timestamp)
