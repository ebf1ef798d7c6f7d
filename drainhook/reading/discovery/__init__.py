"""Listener discovery (CONTRACT §2a): /proc/net -> listeners -> the search."""
