# CI stand-in for postgres:16.6-bookworm (scripts/check-containers; never pushed, never in
# docker/): Debian bookworm's PostgreSQL 15, with a small entrypoint that honours POSTGRES_USER,
# POSTGRES_PASSWORD and POSTGRES_DB like the official image's and initialises a UTF8 cluster.
ARG BASE
FROM ${BASE}
# The package's own cluster (15/main) is not the one served: PGDATA is, as in the official image.
RUN rm -rf /var/lib/postgresql/15 /etc/postgresql/15 \
 && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown postgres:postgres /var/lib/postgresql/data /run/postgresql \
 && chmod 0700 /var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
