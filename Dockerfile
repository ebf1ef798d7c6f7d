# drainhook, packaged once for every engine image (docs/packaging.md).
#
# A PyInstaller build runs on any glibc at least as new as the one it was
# built against, so the build stage is Debian 11 (glibc 2.31): the result runs
# on Ubuntu 20.04, 22.04, 24.04 and on every vLLM and SGLang image, and never
# touches the engine's own Python.
#
#   docker build -t drainhook:0.1.0 .                         # FROM scratch, for COPY --from
#   docker build --target installer -t drainhook-installer .  # runnable, for an initContainer
#
# In an engine image's Dockerfile:
#
#   COPY --from=drainhook:0.1.0 /drainhook/drainhook/ /opt/drainhook/
#   # preStop: ["/opt/drainhook/drainhook", "wait", "--grace", "30"]
#   # or the single file:
#   COPY --from=drainhook:0.1.0 /drainhook/drainhook-onefile /usr/local/bin/drainhook

ARG BUILD_IMAGE=python:3.11-slim-bullseye
ARG INSTALLER_IMAGE=debian:bullseye-slim

FROM ${BUILD_IMAGE} AS build
# binutils: PyInstaller strips the collected libraries with `strip`.
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# scripts/build-binary fails if an artifact needs a glibc newer than this.
ENV DRAINHOOK_MAX_GLIBC=2.31
RUN bash scripts/build-binary

# A runnable image holding the directory build, for `drainhook install DIR`
# in an initContainer that fills an emptyDir for a shell-less engine image.
FROM ${INSTALLER_IMAGE} AS installer
COPY --from=build /src/dist/drainhook/ /drainhook/drainhook/
RUN ln -s /drainhook/drainhook/drainhook /usr/local/bin/drainhook
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/drainhook"]
CMD ["--help"]

# The default target: only the builds and their report, nothing to run.
#   /drainhook/drainhook/drainhook     directory build (with _internal/ beside it)
#   /drainhook/drainhook-onefile       single file
#   /drainhook/drainhook-report.json   size, newest glibc needed, libraries from the image
FROM scratch
COPY --from=build /src/dist/drainhook/ /drainhook/drainhook/
COPY --from=build /src/dist/drainhook-onefile /drainhook/drainhook-onefile
COPY --from=build /src/dist/drainhook-report.json /drainhook/drainhook-report.json
