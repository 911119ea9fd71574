# CI stand-in for redis:7.4.1-bookworm (scripts/check-containers; never pushed, never in docker/):
# Debian bookworm's redis 7.0. Like the official image, protected mode is off (other containers
# connect without a password) and /data is the working folder.
ARG BASE
FROM ${BASE}
RUN mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD ["redis-server"]
