"""Reusable dashboard widgets (never import the master or the agent)."""

from dettui.widgets.rowtable import Column, RowTable

__all__ = ["Column", "RowTable"]
