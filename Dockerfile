# syntax=docker/dockerfile:1
# Pet Records in a container: the wheel and the pinned requirements that `make dist` writes into dist/, installed
# as on any host (docs/how-to/install.md), run by a user that is not root.
#
#   make dist
#   docker build -t petrecords .
#   docker run -p 8000:8000 -e PETRECORDS_DATABASE_URL=postgresql://… -e PETRECORDS_AUTH_SECRET=… petrecords
#
# tests/e2e/test_container.py builds it where a Docker engine answers, and everywhere runs its steps as a script in
# an empty directory: the same commands, with each ARG below that is a path placed in that directory.
FROM python:3.11-slim-bookworm

# Where the service is installed and keeps its data (the volume), where dist/ is copied to, and the user it runs
# as: a number, so that an orchestrator that admits no root (Kubernetes' runAsNonRoot) can tell.
ARG APP=/opt/petrecords
ARG DATA=/data
ARG DIST=/tmp/dist
ARG USER_ID=10001

COPY dist/ ${DIST}/
# The versions the tests ran, every file's hash checked, then the wheel alone: nothing is resolved again. pip's
# cache is the engine's, kept between builds and left out of the image.
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv "$APP" \
    && "$APP/bin/pip" install --disable-pip-version-check --require-hashes -r "$DIST/requirements.txt" \
    && "$APP/bin/pip" install --disable-pip-version-check --no-deps "$DIST"/petrecords-*.whl \
    && "$APP/bin/pip" check \
    && rm -r "$DIST" \
    && install -d -o "$USER_ID" -g "$USER_ID" -m 0700 "$DATA"

ENV PATH="$APP/bin:$PATH" \
    PETRECORDS_DATA_DIR="$DATA" \
    PETRECORDS_SHUTDOWN_DRAIN_SECONDS=3
USER ${USER_ID}:${USER_ID}
VOLUME ${DATA}
EXPOSE 8000
# What orchestrators send to stop a container; `serve` drains, then finishes the requests it has taken.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=2s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]
ENTRYPOINT ["petrecords", "serve", "--host", "0.0.0.0", "--port", "8000"]
