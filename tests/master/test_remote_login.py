"""Users without a password (Determined's fresh `admin` and `determined`) are an open door to
whoever reaches the master: they log in only from its own host, and a master that still has
one refuses to listen beyond loopback."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from dettui.errors import InvalidArgument
from dettui.master.app import create_app
from dettui.master.routes import session
from dettui.master.settings import MasterSettings
from tests.master.conftest import Api

REMOTE = {"X-Forwarded-For": "192.0.2.7"}


async def _login(api: Api, username: str, password: str = "", *, headers: dict[str, str],
                 status: int = 200) -> Any:
    return await api.call("POST", "/api/v1/auth/login",
                          {"username": username, "password": password}, headers=headers,
                          status=status)


async def test_no_password_logs_in_only_from_this_host(api: Api) -> None:
    await _login(api, "determined", headers={})  # `det` on the master's host: as Determined
    body = await _login(api, "determined", headers=REMOTE, status=401)
    assert "only taken from the master's own host" in body["message"]
    assert "dettui user change-password NAME" in body["message"]
    body = await _login(api, "admin", headers={"Forwarded": "for=192.0.2.7"}, status=401)
    # the same answer for a user that does not exist: a remote caller learns no names
    assert body == await _login(api, "nobody-here", headers=REMOTE, status=401)
    # with a password, from anywhere
    await api.call("POST", "/api/v1/users/determined/password", {"password": "s3cret"})
    await _login(api, "determined", "s3cret", headers=REMOTE)
    await _login(api, "determined", headers={}, status=401)  # the empty one is gone


@pytest.mark.parametrize(("peer", "local"), [("127.0.0.1", True), ("::1", True),
                                             ("::ffff:127.0.0.1", True),
                                             ("192.0.2.7", False), ("10.0.0.1", False),
                                             (None, False)])
def test_the_peer_address_decides(peer: str | None, local: bool) -> None:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = \
        lambda key, default=None: (peer, 4242) if key == "peername" and peer else default
    request = make_mocked_request("POST", "/api/v1/auth/login", transport=transport)
    assert session._from_this_host(request) is local


async def test_a_master_with_a_passwordless_user_listens_only_on_loopback(
        master_settings: MasterSettings, aiohttp_client: Any) -> None:
    # admin's password set (as `dettui user change-password admin` does), determined's not
    client = await aiohttp_client(create_app(master_settings))
    resp = await client.post("/api/v1/auth/login", data='{"username":"admin","password":""}')
    token = (await resp.json())["token"]
    resp = await client.post("/api/v1/users/admin/password", data='{"password":"s3cret"}',
                             headers={"Authorization": f"Bearer {token}"})
    assert resp.status == 200
    await client.close()
    exposed = replace(master_settings, host="192.0.2.2")
    with pytest.raises(InvalidArgument) as err:
        await aiohttp_client(create_app(exposed))
    message = str(err.value)
    assert "refusing to listen on 192.0.2.2" in message
    assert "user 'determined' has an empty password" in message
    assert "'admin'" not in message
    assert "dettui user change-password NAME" in message
    # --admin-password gives determined the same password while it has none: no refusal
    client = await aiohttp_client(create_app(replace(exposed, admin_password="other")))
    await client.close()


async def test_an_empty_password_is_set_only_from_this_host(api: Api) -> None:
    # any user emptying their own password from afar would keep the master from restarting
    # beyond loopback; an admin creating a password-less user from afar too
    afar = {**api.headers(), **REMOTE}
    body = await api.call("POST", "/api/v1/users/determined/password", {"password": ""},
                          headers=afar, status=400)
    assert "only set from the master's own host" in body["message"]
    admin = {"Authorization": "Bearer " + (await _login(api, "admin", headers={}))["token"]}
    await api.call("POST", "/api/v1/users", {"user": {"username": "bob"}},
                   headers={**admin, **REMOTE}, status=400)
    await api.call("POST", "/api/v1/users", {"user": {"username": "bob"}, "password": "pw"},
                   headers={**admin, **REMOTE})
    await api.call("POST", "/api/v1/users", {"user": {"username": "carol"}}, headers=admin)
    await api.call("POST", "/api/v1/users/determined/password", {"password": "x"},
                   headers=afar)
