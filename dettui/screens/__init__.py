"""Textual screens of the dashboard, one per module. They reach the master only via a Client."""
