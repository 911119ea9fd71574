# CI stand-in for python:3.12.8-slim-bookworm (scripts/check-containers; never pushed, never in
# docker/). No registry answers on the CI machines, so this is Debian bookworm's own Python 3.11
# in a venv first on PATH, as the official image puts its Python in /usr/local.
ARG BASE
FROM ${BASE}
RUN python3 -m venv /opt/python
ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python3"]
