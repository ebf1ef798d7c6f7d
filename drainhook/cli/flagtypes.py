"""What click parsed for the flags of wait, probe and plan (drainhook.cli.flags), by
name and type: the checker's view of a command's keyword arguments. Imported for type
checking only (the hook's start never loads it); tests/test_settings.py holds it to the
options."""

from __future__ import annotations

import typing
from pathlib import Path

from drainhook.engines.gauges import EngineChoice
from drainhook.hook.config import LogFormat, LogReads
from drainhook.reading.config import Source
from drainhook.reading.target import Scheme


class Flags(typing.TypedDict, total=False):
    """Each command gets the groups of flags it declares."""

    url: tuple[str, ...]
    scheme: Scheme
    host: str
    port: tuple[int, ...]
    path: str
    annotations: Path | None
    engine: EngineChoice
    read_timeout: float
    max_body: int
    cacert: Path | None
    tls_server_name: str | None
    insecure: bool
    allow_remote: bool
    source: Source
    api_key_file: Path | None
    discover: bool
    no_discover: bool
    grace: float
    settle: float
    exit_reserve: float
    interval: float
    confirm: int
    linger: float
    max_wait: float | None
    stall_after: float | None
    log_format: LogFormat
    log_reads: LogReads
    log_file: Path | None
    termination_log: str | None
    exit_zero: bool
    quiet: bool
