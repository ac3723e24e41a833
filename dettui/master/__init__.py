"""The master: aiohttp app, SQLite store, pure scheduler, and the cluster runtime."""
