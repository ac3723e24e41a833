"""Launchers used in a config's entrypoint (`python -m dettui.launch.X ...`)."""
