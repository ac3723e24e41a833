"""Routes the real determined==0.38.1 package calls beyond the basics, checked as the master
answers them (the compat tests run the package itself against them)."""

from __future__ import annotations

from tests.master.conftest import Api, allocate
from tests.master.test_api import create
from tests.master.test_auth import as_user


async def test_run_metadata_is_replaced_whole_and_read_back(api: Api) -> None:
    """`core.train.set_metadata` / `get_metadata`: Determined's rules, the trial's own
    allocation or its owner may set it, everyone may read it."""
    admin = await as_user(api, "admin")
    await create(api)  # trial 1: determined's
    await create(admin)  # trial 2: the admin's
    _, token = await allocate(api, 1)
    task = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    assert await api.call("GET", "/api/v1/runs/1/metadata", headers=task) == {"metadata": {}}
    body = {"metadata": {"dataset": {"rows": 10, "tags": ["a", "b"]}, "note": "x"}, "runId": 1}
    set_ = await api.call("POST", "/api/v1/runs/1/metadata", body, headers=task)
    assert set_ == {"metadata": body["metadata"]}
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": {"note": "y"}})  # owner
    assert (await admin.call("GET", "/api/v1/runs/1/metadata")) == {"metadata": {"note": "y"}}
    await api.call("GET", "/api/v1/runs/2/metadata", headers=task, status=403)
    await api.call("POST", "/api/v1/runs/2/metadata", {"metadata": {}}, headers=task,
                   status=403)
    refused = await api.call("POST", "/api/v1/runs/2/metadata", {"metadata": {}}, status=403)
    assert "only the owner of run 2" in refused["message"]
    await api.call("POST", "/api/v1/runs/99/metadata", {"metadata": {}}, status=404)
    await api.call("GET", "/api/v1/runs/99/metadata", status=404)
    for bad, why in [({"a.b": 1}, "can not contain"), ({"k" * 51: 1}, "key exceeds"),
                     ({"l": list(range(101))}, "array exceeds"), ({"s": "x" * 5001}, "value"),
                     (_nested(11), "nesting depth"), ({str(i): i for i in range(1001)},
                                                       "key count limit")]:
        refused = await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": bad},
                                 status=400)
        assert why in refused["message"], (bad, refused)
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": {}, "runId": 2}, status=400)
    await api.call("POST", "/api/v1/runs/1/metadata", {"metadata": _nested(10)})
    assert (await api.call("GET", "/api/v1/runs/1/metadata"))["metadata"] == _nested(10)


def _nested(depth: int) -> dict:
    out: dict = {"leaf": 1}
    for _ in range(depth - 1):
        out = {"n": out}
    return out

