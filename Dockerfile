# A container image of Pet Records, built with the same `make install` as everywhere else. Untested here: no
# container engine runs on the machines this project is built and tested on (docs/how-to/deploy.md).
#
#   docker build -t petrecords .
#   docker run -p 8000:8000 -e PETRECORDS_DATABASE_URL=postgresql://… -e PETRECORDS_AUTH_SECRET=… petrecords
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /app --shell /usr/sbin/nologin petrecords

WORKDIR /app
# The dependencies first, so that a change of the code alone reuses this layer.
COPY --chown=petrecords:petrecords Makefile pyproject.toml uv.lock README.md ./
COPY --chown=petrecords:petrecords src ./src
USER petrecords
RUN make install PYTHON=python3.11

ENV PETRECORDS_DATA_DIR=/data \
    PETRECORDS_SHUTDOWN_DRAIN_SECONDS=3
USER root
RUN mkdir /data && chown petrecords:petrecords /data
USER petrecords
VOLUME /data
EXPOSE 8000
# What orchestrators send to stop a container; `serve` drains, then finishes the requests it has taken.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=2s --retries=3 \
    CMD ["/app/.venv/bin/python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]
ENTRYPOINT ["/app/.venv/bin/petrecords", "serve", "--host", "0.0.0.0", "--port", "8000"]
