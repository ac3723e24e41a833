"""The one decoder of the master's error responses, used by every client."""

from __future__ import annotations

import pickle

import pytest

from dettui import errors

CASES = [
    (400, b'{"message": "bad config"}', "bad config"),
    (404, '{"error": {"message": "no trial", "error": "other"}}', "no trial"),
    (404, b'{"error": {"error": "not found: trial 3"}}', "not found: trial 3"),
    (500, b'{"error": "plain string"}', "plain string"),
    (400, b'{"message": "", "error": {"message": "the real one"}}', "the real one"),
    (502, b"<html>Bad Gateway</html>\n", "<html>Bad Gateway</html>"),
    (503, b"", "HTTP 503"),
    (401, b"\xff\xfe not utf-8", "\ufffd\ufffd not utf-8"),
    (400, b"[1, 2]", "[1, 2]"),
]


@pytest.mark.parametrize(("status", "body", "message"), CASES)
def test_message_of(status: int, body: bytes | str, message: str) -> None:
    assert errors.message_of(status, body) == message


def test_from_response_picks_the_class_by_status() -> None:
    err = errors.from_response(404, b'{"message": "gone"}')
    assert isinstance(err, errors.NotFound) and str(err) == "gone"
    assert type(errors.from_response(418, b"{}")) is errors.DettuiError
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is errors.NotFound and again.message == "gone"
