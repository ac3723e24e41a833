"""How a master address given with -m or DET_MASTER is read (review of issue 31, N5), as
Determined reads it: no scheme means http:// and port 8080, a bare port is this host's; what is
not a master URL is an error naming it."""

from __future__ import annotations

import pytest

from dettui import client, errors
from dettui.errors import InvalidArgument


@pytest.mark.parametrize(("given", "url"), [
    ("18499", "http://127.0.0.1:18499"),
    (":18499", "http://127.0.0.1:18499"),
    ("127.0.0.1", "http://127.0.0.1:8080"),
    ("10.0.0.5:9000", "http://10.0.0.5:9000"),
    ("[::1]", "http://[::1]:8080"),
    ("http://127.0.0.1", "http://127.0.0.1"),
    ("https://det.example.org/", "https://det.example.org"),
    ("http://h:1/base/", "http://h:1/base"),
])
def test_master_urls_read_as_determined_reads_them(given: str, url: str) -> None:
    assert client.master_url(given) == url


@pytest.mark.parametrize("given", ["ftp://h:1", "http://u:p@h:1", "http://h:1/?x=1",
                                   "http://h:port", "http://"])
def test_what_is_not_a_master_url_is_an_error_naming_it(given: str) -> None:
    with pytest.raises(InvalidArgument, match="not a master URL"):
        client.master_url(given)


def test_an_error_without_a_message_names_the_url_and_the_request() -> None:
    """A JSON server that is not a master answers 404 with nothing in it: not "Not found:
    HTTP 404" alone."""
    err = errors.from_response(404, b"", url="http://127.0.0.1:18499",
                               request="GET /api/v1/experiments",
                               content_type="application/json")
    assert isinstance(err, errors.NotFound)
    assert err.message == ("http://127.0.0.1:18499 answered GET /api/v1/experiments with "
                           "HTTP 404 and no message")
