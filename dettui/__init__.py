"""dettui: a training control plane in the spirit of Determined AI, built for the terminal."""

from __future__ import annotations

__version__ = "0.1.0"
# The Determined release whose REST wire protocol the master speaks.
DETERMINED_VERSION = "0.38.1"
