#!/bin/sh
# The stand-in postgres image's entrypoint (scripts/containers/postgres.Dockerfile). Before the
# server first starts on an empty PGDATA: a UTF8 cluster whose superuser is POSTGRES_USER with
# POSTGRES_PASSWORD (scram over TCP, trust on the local socket) and a database POSTGRES_DB, as
# the official image's entrypoint makes. The server listens on every address of the container.
set -eu
if [ "${1:-}" = postgres ]; then
  : "${PGDATA:=/var/lib/postgresql/data}"
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}" >"$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
      # Single-user mode: no server answers (half-ready) before the real one starts.
      echo "CREATE DATABASE \"$db\" OWNER \"$user\"" | postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "stand-in entrypoint: initialised $PGDATA (UTF8), user $user, database $db"
  fi
  shift
  set -- postgres -c listen_addresses='*' "$@"
fi
exec "$@"
