# drainhook, packaged once for every engine image (docs/packaging.md).
#
# The directory build carries its own C library and loader behind a static
# launcher, so it needs nothing from the image it is copied into but a Linux
# kernel of its architecture (with a Debian 12 builder: 3.2 or newer on x86-64,
# 3.7 on arm64): glibc 2.31, 2.34, 2.36 and newer, musl, or no libc at all
# (distroless/static, FROM scratch). The build stage can be any Debian or
# Ubuntu image, with or without its own Python.
#
#   docker build -t drainhook:0.1.0 .                         # FROM scratch, for COPY --from
#   docker build --target installer -t drainhook-installer .  # runnable, for an initContainer
#   docker buildx build --platform linux/amd64,linux/arm64 -t drainhook:0.1.0 .
#
# Each platform's build stage builds natively for that platform (under
# emulation on a machine of the other kind), so the image of either platform
# holds the build for it: the same paths, the report naming its architecture.
#
# In an engine image's Dockerfile:
#
#   COPY --from=drainhook:0.1.0 /drainhook/drainhook/ /opt/drainhook/
#   RUN ln -s /opt/drainhook/drainhook /usr/local/bin/drainhook
#   # preStop: ["/usr/local/bin/drainhook", "wait", "--grace", "30", "--log-file", "/proc/1/fd/1"]
#
# CI builds this file with buildah for both platforms from base images made by
# debootstrap, into a manifest list (scripts/build-image); a pip behind a
# TLS-inspecting proxy can be given its CA bundle by mounting it at
# /run/drainhook-ca.crt (buildah bud -v, docker build --secret is not needed).

ARG BUILD_IMAGE=python:3.11-slim-bookworm

FROM ${BUILD_IMAGE} AS build
# binutils: PyInstaller strips the collected libraries with `strip`.
# musl-tools, gcc, libc6-dev: the static launcher (musl-gcc, else gcc -static).
# A plain Debian or Ubuntu image has no Python: then Debian's, with its shared
# library (libpython3-dev), which PyInstaller bundles.
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils gcc libc6-dev musl-tools ca-certificates \
 && if ! command -v python3 >/dev/null; then \
      apt-get install -y --no-install-recommends python3 python3-venv libpython3-dev; \
    fi \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN if [ -f /run/drainhook-ca.crt ]; then export PIP_CERT=/run/drainhook-ca.crt; fi \
 && bash scripts/build-binary \
 && mkdir -p /out/drainhook /out/usr/local/bin \
 && cp -a dist/drainhook dist/drainhook-report.json /out/drainhook/ \
 && ln -s /drainhook/drainhook/drainhook /out/usr/local/bin/drainhook

# A runnable image holding only the directory build (no libc, no shell), for
# `drainhook install DIR` in an initContainer that fills an emptyDir for a
# shell-less engine image; /usr/local/bin/drainhook is a link to the launcher.
FROM scratch AS installer
COPY --from=build /out/ /
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/drainhook"]
CMD ["--help"]

# The default target: only the build and its report, nothing to run.
#   /drainhook/drainhook/drainhook     the launcher (with bootloader and _internal/ beside it)
#   /drainhook/drainhook-report.json   size, bundled libraries and versions, kernel floor
FROM scratch
COPY --from=build /out/drainhook/ /drainhook/
