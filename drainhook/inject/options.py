"""What `inject` is told and says (CONTRACT §4): its options, where the hook's binary
sits under each --via, a line of its stderr, a refusal."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import click

from drainhook import exits
from drainhook.engines.gauges import EngineChoice
from drainhook.errors import DrainhookError, UsageError
from drainhook.planning.plan import DEFAULT_BINARY, Via

# Where the Dockerfile's default image (FROM scratch) holds the directory build:
# /drainhook/drainhook/ (the launcher `drainhook`, its bootloader, _internal/).
IMAGE_BUILD_DIR = "drainhook/drainhook"
IMAGE_LAUNCHER = "/" + IMAGE_BUILD_DIR + "/drainhook"
# --via image-volume: that image as a volume, its build directory mounted alone
# (subPath: a directory, as image volumes allow; containerd >= 2.2, CRI-O >= 1.33).
VOLUME_NAME = "drainhook"
VOLUME_MOUNT = "/opt/drainhook"
# --via init: `drainhook install /hook` fills an emptyDir; install's own layout
# puts the launcher at DIR/drainhook/drainhook.
INIT_NAME = "install-drainhook"
INIT_VOLUME = "hook"
INIT_MOUNT = "/hook"
INIT_SIZE = "64Mi"
INSTALL_UID = 65534  # nobody: the installer runs as a user no image needs to name


@dataclass(frozen=True)
class Options:
    """How `inject` wires the hook: built once from the command line."""

    via: Via = "image"
    image: str | None = None
    binary: str = DEFAULT_BINARY  # --via image: where the engine image holds it
    container: str | None = None
    engine: EngineChoice = "auto"
    engine_version: str | None = None  # X.Y: what the image tags cannot say
    # `wait`'s own click parameters, handed in by the command line (planning sits
    # below cli/): an existing hook's flags are read by them (parse_hook).
    wait_params: tuple[click.Parameter, ...] = ()
    binary_given: bool = False  # --binary said where the image holds it (an upstream one too)

    def check(self) -> None:
        if self.via != "image" and not self.image:
            raise UsageError(f"--via {self.via} needs --image REF (drainhook's image)")
        if self.via == "image" and self.image:
            raise UsageError("--image is for --via image-volume or init")
        if self.via != "image" and self.binary != DEFAULT_BINARY:
            raise UsageError(f"--binary is for --via image (--via {self.via} puts the hook itself)")
        if not self.wait_params:
            raise DrainhookError("inject was not handed wait's options")
        if self.engine_version is not None and version_in(self.engine_version) is None:
            raise UsageError(f"--engine-version must be X.Y (0.18), not {self.engine_version!r}")
        if not self.binary.startswith("/"):
            raise UsageError(
                f"--binary must be an absolute path (an exec hook), not {self.binary!r}"
            )

    @property
    def hook_binary(self) -> str:
        if self.via == "image-volume":
            return f"{VOLUME_MOUNT}/drainhook"
        if self.via == "init":
            return f"{INIT_MOUNT}/drainhook/drainhook"
        return self.binary


Level = Literal["refused", "injected", "replaced", "changed", "warning", "skipped"]


@dataclass(frozen=True)
class Message:
    """One line on stderr about one document: `refused` (written unchanged),
    `injected`, `replaced` (a sleep hook), `changed` (a value other than the one
    given), `warning` (advice inject could not apply), `skipped` (pod specs of a
    kind inject does not know, written unchanged)."""

    where: str  # "SOURCE#N KIND/NAME"
    level: Level
    text: str

    def line(self) -> str:
        return " ".join(f"drainhook inject: {self.where}: {self.level}: {self.text}".split())


class Refused(DrainhookError):
    """A document inject must leave as it is; the message says why."""

    exit_code = exits.INJECT_REFUSED


def version_in(text: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+.].*)?$", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None
