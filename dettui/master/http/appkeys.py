"""Typed aiohttp application and request keys: what the app holds (store, settings, cluster,
notifier, group commits) and who calls a request (`PRINCIPAL`). The push stream's keys live
with its feeds (`views.feeds`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from dettui.master.cluster import Cluster
    from dettui.master.groupcommit import GroupCommit
    from dettui.master.http.principal import Principal
    from dettui.master.master_log import MasterLog
    from dettui.master.notifier import Notifier
    from dettui.master.settings import MasterSettings
    from dettui.master.store import Database
    from dettui.master.store.experiments import NewExperiment
    from dettui.master.store.metrics import MetricReport
    from dettui.master.store.records import Experiment
    from dettui.master.store.search import Opening
    from dettui.master.tokens import Mint

DB: web.AppKey[Database] = web.AppKey("db")
SETTINGS: web.AppKey[MasterSettings] = web.AppKey("settings")
MINT: web.AppKey[Mint] = web.AppKey("mint")  # derives trials' tokens
CLUSTER: web.AppKey[Cluster] = web.AppKey("cluster")
NOTIFIER: web.AppKey[Notifier] = web.AppKey("notifier")
CLUSTER_ID: web.AppKey[str] = web.AppKey("cluster_id")
INGEST: web.AppKey[GroupCommit[MetricReport, None]] = web.AppKey("ingest")  # group-committed
CREATIONS: web.AppKey[GroupCommit[tuple[NewExperiment, Opening], tuple[Experiment, list[int]]]] = (
    web.AppKey("creations"))  # new experiments, group-committed
MASTER_LOG: web.AppKey[MasterLog] = web.AppKey("master_log")  # its own recent log lines
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal")
