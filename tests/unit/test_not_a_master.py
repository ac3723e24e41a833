"""A web page where a master's JSON was expected is named, never shown (issue 31): its title
at most, plain and capped; JSON, and a master's own plain-text errors, decode as before."""

from __future__ import annotations

import pytest

from dettui import errors

URL = "http://127.0.0.1:8080"


@pytest.mark.parametrize(("kind", "body"), [
    ("text/html; charset=utf-8", b"<html><title>It works</title></html>"),
    ("", b"  <!DOCTYPE html><html><TITLE>It works</TITLE>"),
    ("application/xml", b"<?xml version='1.0'?><error/>"),
])
def test_a_web_page_is_not_a_master(kind: str, body: bytes) -> None:
    err = errors.from_response(404, body, url=URL, request="GET /info", content_type=kind)
    assert isinstance(err, errors.NotAMaster) and isinstance(err, errors.MasterUnreachable)
    assert err.message.startswith(f"{URL} is not a dettui/Determined master (it answered "
                                  "GET /info with "), err.message
    assert "<" not in err.message


def test_the_title_is_plain_and_capped() -> None:
    title = "\x1b[31mred\x07 [b]bold[/b]\n" + "x" * 5000
    err = errors.not_a_master(URL, "POST /api/v1/auth/login", 200, "text/html",
                              f"<title>{title}</title>")
    assert "\x1b" not in err.message and "\x07" not in err.message
    assert len(err.message) < 400


@pytest.mark.parametrize(("kind", "body", "message"), [
    ("application/json", b'{"message": "no such experiment"}', "no such experiment"),
    ("text/plain", b"404: Not Found", "404: Not Found"),
])
def test_a_masters_answers_decode_as_before(kind: str, body: bytes, message: str) -> None:
    err = errors.from_response(404, body, url=URL, request="GET /x", content_type=kind)
    assert type(err) is errors.NotFound and err.message == message
