"""Advice beside the hook, never under it: `plan`, `plan --observe`, the latency histogram."""
