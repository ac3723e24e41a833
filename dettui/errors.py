"""The DettuiError hierarchy: every error a user can see, with a title and an HTTP/gRPC mapping.

Raised anywhere, translated once per surface: master middleware -> JSON body, client -> the same
classes again, CLI -> one red line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence


class DettuiError(Exception):
    """Base of all errors meant for users. `message` is one or more plain sentences."""

    title = "Error"
    http_status = 500
    grpc_code = 2  # Unknown
    grpc_reason = "Unknown"
    # Seconds a client should wait before it sends the same request again (HTTP Retry-After),
    # for errors that pass on their own; None: retrying the same request will not help.
    retry_after: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by state, not by constructor arguments (subclasses take other ones): errors
        raised in the master's worker processes come back whole."""
        return (_restore, (type(self), self.message, dict(self.__dict__)))


def _restore(cls: type[DettuiError], message: str, state: dict[str, object]) -> DettuiError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class InvalidArgument(DettuiError):
    title = "Invalid argument"
    http_status = 400
    grpc_code = 3
    grpc_reason = "InvalidArgument"


class FailedPrecondition(DettuiError):
    title = "Not allowed now"
    http_status = 400
    grpc_code = 9
    grpc_reason = "FailedPrecondition"


class NotFound(DettuiError):
    title = "Not found"
    http_status = 404
    grpc_code = 5
    grpc_reason = "NotFound"


class Gone(NotFound):
    """Something that was there is not any more: an agent the master declared lost."""

    title = "Gone"
    http_status = 410


class Conflict(DettuiError):
    title = "Conflict"
    http_status = 409
    grpc_code = 6
    grpc_reason = "AlreadyExists"


class Unauthenticated(DettuiError):
    title = "Not logged in"
    http_status = 401
    grpc_code = 16
    grpc_reason = "Unauthenticated"


class PermissionDenied(DettuiError):
    title = "Forbidden"
    http_status = 403
    grpc_code = 7
    grpc_reason = "PermissionDenied"


class TooLarge(DettuiError):
    title = "Too large"
    http_status = 413
    grpc_code = 8
    grpc_reason = "ResourceExhausted"


class QuotaExceeded(DettuiError):
    """A configured quota (checkpoint storage) would be exceeded; the message names the quota,
    the usage and what to delete. gRPC's ResourceExhausted, which grpc-gateway (Determined's
    REST edge) sends as 429; retrying the same request does not help (no Retry-After, and
    Determined's client, as ours, retries only 502, 503 and 504)."""

    title = "Over quota"
    http_status = 429
    grpc_code = 8
    grpc_reason = "ResourceExhausted"


class Unavailable(DettuiError):
    title = "Unavailable"
    http_status = 503
    grpc_code = 14
    grpc_reason = "Unavailable"


class StorageFull(Unavailable):
    """The master could not write: the filesystem of its state dir (or its PostgreSQL server's
    disk) is full. Nothing of the request was kept, and the same request succeeds once space is
    freed, so it is a 503 with a Retry-After: what Determined's client, our agents and the Core
    API already retry (never a 500, which they treat as final)."""

    title = "Disk full"
    retry_after = 5


class Unimplemented(DettuiError):
    """A feature of Determined that dettui does not offer; the message says what to use."""

    title = "Not supported"
    http_status = 501
    grpc_code = 12
    grpc_reason = "Unimplemented"


class ConfigError(InvalidArgument):
    """An experiment config with one or more problems, each naming its path.

    `problems` holds lines such as ``resources.slots_per_trial: must be >= 0``.
    """

    title = "Invalid experiment configuration"

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" ({source})" if source else ""
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid experiment configuration{where}:\n{body}")


class ContextError(InvalidArgument):
    """A model context that cannot be packed or extracted safely."""

    title = "Invalid model context"


class MasterUnreachable(DettuiError):
    """The client could not reach the master at all."""

    title = "Master unreachable"
    http_status = 503


class NotAMaster(MasterUnreachable):
    """What answers at the master's address is a web server of another kind (it sent a web
    page where a master sends JSON): named as such, instead of printing its page."""

    title = "Not a master"


class BadAnswer(DettuiError):
    """The master answered, but not with what a master sends (a key missing, or of another
    type): a server of another kind or version. Named, never a KeyError."""

    title = "Bad answer"
    http_status = 502


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "a number"}


def bad_answer(url: str, request: str, key: str | None, kind: type) -> BadAnswer:
    """`url` answered `request` without `key` as a `kind` (`key` None: the answer itself was
    not a `kind`)."""
    what = _KINDS.get(kind, kind.__name__)
    if key is None:
        return BadAnswer(f"the master at {url} answered {request} with something other than "
                         f"{what}; is it a dettui/Determined master?")
    return BadAnswer(f"the master at {url} answered {request} without {what} `{key}`; is it a "
                     "dettui/Determined master?")


class AddressInUse(DettuiError):
    """The master's port is taken by another process."""

    title = "Port in use"


class MasterRunning(Conflict):
    """A master already runs on this state dir."""

    title = "Master already running"


_BY_STATUS: dict[int, type[DettuiError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    410: Gone,
    409: Conflict,
    413: TooLarge,
    429: QuotaExceeded,
    501: Unimplemented,
    503: Unavailable,
}


def from_status(status: int, message: str) -> DettuiError:
    """The error class a client raises for an HTTP status from the master."""
    return _BY_STATUS.get(status, DettuiError)(message)


def message_of(status: int, body: bytes | str) -> str:
    """The sentence in an error response: Determined's `{"message": ...}` (what our master
    sends), or grpc-gateway's `{"error": {"message"|"error": ...}}`; else the body's text, or
    the status when the body is empty. The one decoder of every client (CLI, dashboard, agent,
    Core API)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip() or f"HTTP {status}"
    if isinstance(data, dict):
        if isinstance(data.get("message"), str) and data["message"]:
            return str(data["message"])
        err = data.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or err.get("error") or err)
        if isinstance(err, str) and err:
            return err
    return text.strip() or f"HTTP {status}"


_TITLE = re.compile(rb"<title[^>]*>(.{0,400}?)</title", re.IGNORECASE | re.DOTALL)


def web_page(content_type: str, body: bytes | str) -> bool:
    """The answer is a web page (HTML or XML), not a master's JSON."""
    kind = content_type.partition(";")[0].strip().lower()
    if kind in ("text/html", "application/xhtml+xml", "text/xml", "application/xml"):
        return True
    head = (body.encode("utf-8", "replace") if isinstance(body, str) else body)[:256]
    return head.lstrip()[:1] == b"<" and not kind.endswith("json")


def not_a_master(url: str, request: str, status: int, content_type: str,
                 body: bytes | str) -> NotAMaster:
    """`url` answered `request` (`GET /info`) with a web page: it is not a dettui or
    Determined master. The page's title is named (plain, capped), never the page."""
    raw = body.encode("utf-8", "replace") if isinstance(body, str) else body
    found = _TITLE.search(raw[:65536])
    title = " ".join(found.group(1).decode("utf-8", "replace").split()) if found else ""
    title = "".join(ch for ch in title if ch.isprintable())[:80]
    kind = "".join(ch for ch in content_type.partition(";")[0].strip()
                   if ch.isprintable())[:80] or "a web page"
    said = f"{kind}, HTTP {status}" + (f': "{title}"' if title else "")
    return NotAMaster(f"{url} is not a dettui/Determined master (it answered {request} with "
                      f"{said}); give the master's address with -m or DET_MASTER")


def from_response(status: int, body: bytes | str, *, url: str = "", request: str = "",
                  content_type: str = "") -> DettuiError:
    """The error a client raises for an error response of the master. Given where the
    answer came from (`url`, `request`), a web page instead of JSON is NotAMaster."""
    if url and web_page(content_type, body):
        return not_a_master(url, request, status, content_type, body)
    message = message_of(status, body)
    if url and message == f"HTTP {status}":  # nothing said: at least where, and what was asked
        message = f"{url} answered {request} with HTTP {status} and no message"
    return from_status(status, message)
