"""How the hook's binary reaches an engine container, by `inject --via` (CONTRACT §4):
the image volume or the installer initContainer and the mounts they need, and what
another --via put there before taken away. Edits in place, by entry name."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence

from drainhook.inject.manifests import Node, insert_before
from drainhook.inject.options import (
    IMAGE_BUILD_DIR,
    IMAGE_LAUNCHER,
    INIT_MOUNT,
    INIT_NAME,
    INIT_SIZE,
    INIT_VOLUME,
    INSTALL_UID,
    VOLUME_MOUNT,
    VOLUME_NAME,
    Options,
)


def upsert(items: list[Node], value: Mapping[str, Node]) -> None:
    """Put value in a list of named entries: replacing the one of its name."""
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == value["name"]:
            if item != value:
                items[i] = value
            return
    items.append(value)


def named_list(m: dict[str, Node], key: str, before: Sequence[str] = ()) -> list[Node]:
    """m[key] as a list, made (before the keys `before`) when it is missing."""
    items = m.get(key)
    if not isinstance(items, list):
        items = []
        insert_before(m, key, items, before)
    return items


def bring_binary(spec: dict[str, Node], container: dict[str, Node], options: Options) -> None:
    """Make the hook's binary reach the container, by --via; what another --via put
    there before (an image volume, the installer) is taken away."""
    if options.via != "image-volume":
        _drop(spec, "volumes", VOLUME_NAME, lambda v: "image" in v)
        _drop(container, "volumeMounts", VOLUME_NAME, lambda m: m.get("mountPath") == VOLUME_MOUNT)
    if options.via != "init" and _drop(spec, "initContainers", INIT_NAME, lambda c: True):
        _drop(spec, "volumes", INIT_VOLUME, lambda v: "emptyDir" in v)
        _drop(container, "volumeMounts", INIT_VOLUME, lambda m: m.get("mountPath") == INIT_MOUNT)
    installer, volume, mount = arrival(options)
    if installer is not None:
        upsert(named_list(spec, "initContainers", ("containers",)), installer)
    if volume is not None and mount is not None:
        upsert(named_list(spec, "volumes"), volume)
        upsert(named_list(container, "volumeMounts"), mount)


Entry = dict[str, object]


def arrival(options: Options) -> tuple[Entry | None, Entry | None, Entry | None]:
    """What --via adds for the binary to arrive: the installer initContainer, the
    Pod's volume, the engine container's mount (None for what it does not add)."""
    if options.via == "image-volume":
        image = {"reference": options.image, "pullPolicy": "IfNotPresent"}
        mount: Entry = {"name": VOLUME_NAME, "mountPath": VOLUME_MOUNT, "subPath": IMAGE_BUILD_DIR}
        return None, {"name": VOLUME_NAME, "image": image}, {**mount, "readOnly": True}
    if options.via != "init":
        return None, None, None
    installer: Entry = {
        "name": INIT_NAME,
        "image": options.image,
        "command": [IMAGE_LAUNCHER, "install", INIT_MOUNT],
        "securityContext": RESTRICTED,
        "volumeMounts": [{"name": INIT_VOLUME, "mountPath": INIT_MOUNT}],
    }
    empty: Entry = {"name": INIT_VOLUME, "emptyDir": {"sizeLimit": INIT_SIZE}}
    return installer, empty, {"name": INIT_VOLUME, "mountPath": INIT_MOUNT, "readOnly": True}


# The installer's securityContext: what Pod Security's `restricted` level asks (and
# `runAsNonRoot` with it: drainhook's image names no user, so one is given).
# `install` writes into the emptyDir, which the kubelet makes world-writable.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": INSTALL_UID,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _drop(
    m: dict[str, Node], key: str, name: str, ours: typing.Callable[[Mapping[str, Node]], bool]
) -> bool:
    """Take the entry `name` out of m[key] when it is ours (a user's entry of that
    name stays); the list goes when it is left empty. Whether one was taken."""
    items = m.get(key)
    if not isinstance(items, list):
        return False
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == name and ours(item):
            del items[i]
            if not items:
                del m[key]
            return True
    return False
