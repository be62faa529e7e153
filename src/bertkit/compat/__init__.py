"""Adapters that give other libraries' APIs on bertkit's one engine."""
