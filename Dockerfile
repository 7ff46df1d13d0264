# frugal-proxy as a Streamable HTTP sidecar.
#
#   docker build -t frugal-proxy .
#   docker run -e FRUGAL_AUTH_TOKEN=... -p 127.0.0.1:8765:8765 frugal-proxy
#
# The default command serves the config at $FRUGAL_CONFIG (/app/frugal.toml: the bundled notes
# example server, so that a fresh container answers tools/list); mount your own over it with
# `-v ./frugal.toml:/app/frugal.toml:ro`. Without FRUGAL_AUTH_TOKEN the proxy refuses to listen on
# 0.0.0.0 and the container exits with status 2. tests/e2e/test_docker_sidecar.py reads this file.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY proxy ./proxy
COPY providers ./providers
COPY policies ./policies
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH \
    HOME=/home/frugal \
    FRUGAL_HOME=/home/frugal/.frugal \
    FRUGAL_CONFIG=/app/frugal.toml
COPY --from=build /wheels /wheels
# The `examples` extra brings the mcp SDK, which only the bundled example server needs; the `redis`
# extra the client of `[state] backend = "redis"` (examples/fleet/compose.yaml).
RUN python -m venv /opt/venv \
    && wheel="$(echo /wheels/frugal_proxy-*.whl)" \
    && /opt/venv/bin/pip install --no-cache-dir "${wheel}[examples,redis]" \
    && rm -rf /wheels \
    && useradd --uid 1000 --user-group --create-home --home-dir /home/frugal --shell /usr/sbin/nologin frugal
WORKDIR /app
COPY examples/docker/frugal.toml ./frugal.toml
COPY examples/servers/notes_server.py ./notes_server.py
# uid 1000 is also AnythingLLM's, so both containers can write a shared plugins folder.
USER 1000:1000
EXPOSE 8765
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=4)"]
ENTRYPOINT ["frugal-proxy"]
CMD ["serve", "--http", "0.0.0.0:8765", "--stateless"]
