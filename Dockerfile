# syntax=docker/dockerfile:1
# The torchrun-controller image: the operator (`torchrun-controller`, the entrypoint) and the sync
# program the sync pods run from the same image (`python -m controller.sync`).
#
#   docker build -t ghcr.io/torchrun-ai/torchrun-controller:0.1.0 .
#
# Two stages: `build` turns the project and its dependencies into wheels; the final stage installs
# them, offline, into a virtualenv on a clean base, so no compiler, pip cache or source tree ships.
# The sync pods' sources need two things beyond the controller: the `sync` extra (boto3, for `s3`)
# and the `git` binary with ssh and the CA bundle (for `git` over ssh and https). The workers'
# progress reporter sidecar runs from this image too; the `debug` extra gives it py-spy, for
# `kubectl torchrun stack`.
# It runs as the numeric non-root user 65532, which lets Kubernetes verify `runAsNonRoot`.
# For reproducible builds pin the base by digest: --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# setup.cfg reads README.md as the long description
COPY setup.py setup.cfg README.md ./
COPY controller ./controller
# the project's wheel plus a wheel of every dependency, the sync extra's included (all publish
# wheels: nothing compiles)
RUN pip wheel --wheel-dir /wheels ".[sync,debug]"

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="torchrun-controller" \
      org.opencontainers.image.description="Kubernetes operator for distributed PyTorch training with torchrun" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
ENV VIRTUAL_ENV=/opt/torchrun-controller \
    PATH=/opt/torchrun-controller/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/nonroot
# A venv without pip of its own; the base's pip installs into it from the build stage's wheels
# (bind-mounted, so they never become a layer). `python` on PATH is the venv's, which is what
# the sync pods' `python -m controller.sync` needs.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python -m venv --without-pip "$VIRTUAL_ENV" \
 && pip --python "$VIRTUAL_ENV/bin/python" install --no-index --no-cache-dir --find-links=/wheels \
        "torchrun-controller[sync,debug]" \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home \
        --shell /usr/sbin/nologin nonroot
WORKDIR /home/nonroot
USER 65532:65532
# /metrics and /healthz, /readyz (--metrics-addr, --health-addr)
EXPOSE 8080 8081
ENTRYPOINT ["torchrun-controller"]
