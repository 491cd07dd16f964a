"""Scheduler plugins: each hook judges every node at once."""
