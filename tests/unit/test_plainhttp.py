"""The one-shot commands' HTTP (dettui.plainhttp under Client(plain=True)) against a real aiohttp
server on 127.0.0.1: kept-alive connections, a connection the server closed, errors as the
aiohttp client reports them, the query as the server reads it, and an exit that does not wait
for a blocked call."""

from __future__ import annotations

import asyncio
import http.client
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from dettui import errors, plainhttp
from dettui.client import Client


class Seen:
    def __init__(self) -> None:
        self.peers: list[tuple[str, int]] = []
        self.queries: list[list[tuple[str, str]]] = []
        self.bodies: list[bytes] = []


def _app(seen: Seen) -> web.Application:
    async def echo(request: web.Request) -> web.Response:
        seen.peers.append(request.transport.get_extra_info("peername"))
        seen.queries.append(list(request.query.items()))
        seen.bodies.append(await request.read())
        return web.json_response({"ok": True, "method": request.method,
                                  "auth": request.headers.get("Authorization")})

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"message": "experiment 7 not found"}, status=404)

    async def garbled(request: web.Request) -> web.Response:
        return web.Response(body=b'{"jobs": [', content_type="application/json")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.json_response({})

    async def closes(request: web.Request) -> web.Response:
        return web.json_response({"n": len(seen.peers)}, headers={"Connection": "close"})

    async def named(request: web.Request) -> web.Response:
        return web.json_response({"name": request.match_info["name"],
                                  "query": list(request.query.items())})

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("https://elsewhere.example/api")

    app = web.Application()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/users/{name}/by-username", named)
    app.router.add_get("/moved", moved)
    app.router.add_get("/missing", missing)
    app.router.add_get("/garbled", garbled)
    app.router.add_get("/slow", slow)
    app.router.add_get("/closes", closes)
    return app


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, Seen, web.AppRunner]]:
    seen = Seen()
    runner = web.AppRunner(_app(seen), keepalive_timeout=0.3)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", seen, runner
    finally:
        await runner.cleanup()


async def test_calls_reuse_one_connection_and_carry_the_token(server) -> None:
    url, seen, _ = server
    async with Client(url, "tok", plain=True) as c:
        for _ in range(5):
            body = await c.request("GET", "/echo")
            assert body == {"ok": True, "method": "GET", "auth": "Bearer tok"}
        await c.request("POST", "/echo", body={"a": [1, 2]})
    assert len(seen.peers) == 6 and len(set(seen.peers)) == 1, seen.peers
    assert seen.bodies[-1] == b'{"a": [1, 2]}'


async def test_pages_asked_at_once_get_a_connection_each(server) -> None:
    url, seen, _ = server
    async with Client(url, plain=True) as c:
        await asyncio.gather(*(c.request("GET", "/echo") for _ in range(4)))
        await asyncio.gather(*(c.request("GET", "/echo") for _ in range(4)))
    assert 2 <= len(set(seen.peers)) <= 4  # the second round reuses the first round's


async def test_a_connection_the_server_closed_is_not_reused(server) -> None:
    url, seen, _ = server
    async with Client(url, plain=True) as c:
        await c.request("GET", "/echo")
        await asyncio.sleep(0.8)  # past the server's keep-alive: it closed the connection
        assert (await c.request("POST", "/echo", body={}))["ok"]  # a POST is never re-sent
        await c.request("GET", "/closes")  # the server says it closes: not kept
        await c.request("GET", "/echo")
    assert len(set(seen.peers)) == 3, seen.peers


async def test_a_get_on_a_connection_closed_in_flight_is_sent_again(server, monkeypatch) -> None:
    """The race the idle check cannot see: the server closes as the request goes out. A GET
    goes again on a new connection; a POST (it may have been acted on) fails."""
    url, seen, _ = server

    class Stale:  # a kept connection that fails as one the server has just closed
        sock = None
        timeout = 1.0

        def request(self, *args: object, **kwargs: object) -> None:
            raise http.client.RemoteDisconnected("Remote end closed connection")

        def close(self) -> None:
            pass

    monkeypatch.setattr(plainhttp, "_dropped", lambda conn: False)
    pool = plainhttp.Pool(url)
    pool._idle.append(Stale())  # type: ignore[arg-type]
    status, body, _ = await plainhttp.call_off_loop(pool.call, "GET", "/echo")
    assert status == 200 and len(seen.peers) == 1
    pool._idle.append(Stale())  # type: ignore[arg-type]
    with pytest.raises(http.client.RemoteDisconnected):
        await plainhttp.call_off_loop(pool.call, "POST", "/echo", b"{}")
    assert len(seen.peers) == 1
    pool.close()


async def test_errors_read_as_the_aiohttp_client_reports_them(server) -> None:
    url, _, _ = server
    async with Client(url, plain=True, timeout=0.5) as c:
        with pytest.raises(errors.NotFound, match="experiment 7 not found"):
            await c.request("GET", "/missing")
        with pytest.raises(errors.MasterUnreachable, match="cut short or garbled"):
            await c.request("GET", "/garbled")
        started = time.monotonic()
        with pytest.raises(errors.MasterUnreachable, match="did not answer in time"):
            await c.request("GET", "/slow")
        assert time.monotonic() - started < 3
    async with Client("http://127.0.0.1:1", plain=True) as c:
        with pytest.raises(errors.MasterUnreachable,
                           match="cannot reach the master at http://127.0.0.1:1"):
            await c.request("GET", "/echo")


async def test_the_query_reads_back_as_it_was_given(server) -> None:
    url, seen, _ = server
    params = [("states", "A"), ("states", "B"), ("name", "a b+c&d=é/?"), ("n", "3")]
    async with Client(url, plain=True) as c:
        await c.request("GET", "/echo", params=params)
        await c.request("GET", "/echo", params={"limit": "2"})
    assert seen.queries == [params, [("limit", "2")]]


def test_a_command_interrupted_mid_call_exits_at_once() -> None:
    """A call still blocked when the command ends does not hold up the exit (asyncio.to_thread's
    default executor would make asyncio.run wait for it)."""
    code = textwrap.dedent("""
        import asyncio, time
        from dettui import plainhttp
        async def main():
            try:
                await asyncio.wait_for(plainhttp.call_off_loop(time.sleep, 60), 0.2)
            except TimeoutError:
                print("timed out")
        asyncio.run(main())
    """)
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert res.stdout.strip() == "timed out", res.stderr
    assert time.monotonic() - started < 10


async def test_a_path_holding_spaces_question_marks_and_percents_arrives_as_given(server) -> None:
    """A user name or agent id in a path is percent-encoded (as aiohttp's client did): it is
    neither refused by http.client nor cut into a query."""
    url, _, _ = server
    async with Client(url, plain=True) as c:
        for name in ("bob smith", "what?x=1", "50%off", "日本", "a#b"):
            got = await c.request("GET", f"/users/{name}/by-username", params={"k": "v w"})
            assert got == {"name": name, "query": [["k", "v w"]]}


async def test_a_redirect_is_reported_not_followed(server) -> None:
    url, _, _ = server
    async with Client(url, plain=True) as c:
        with pytest.raises(errors.MasterUnreachable,
                           match="redirects to https://elsewhere.example/api .HTTP 301."):
            await c.request("GET", "/moved")


def test_an_address_that_is_not_http_is_a_sentence_not_a_traceback() -> None:
    for url in ("ftp://127.0.0.1:8080", "http://", "127.0.0.1:8080"):
        with pytest.raises(errors.InvalidArgument, match="must be an http:// or https:// URL"):
            Client(url, plain=True)


async def test_an_answer_over_the_cap_is_refused_not_read_whole(server, monkeypatch) -> None:
    url, _, _ = server
    monkeypatch.setattr(plainhttp, "MAX_ANSWER", 16)
    async with Client(url, plain=True) as c:
        with pytest.raises(errors.TooLarge, match="is over 0 MiB: not read"):
            await c.request("GET", "/echo")
        monkeypatch.setattr(plainhttp, "MAX_ANSWER", 1 << 20)
        assert (await c.request("GET", "/echo"))["ok"]  # the connection was not reused mid-answer
