#!/bin/sh
# The stand-in redis image's entrypoint: the official image builds redis with protected mode
# off; Debian's is on, so redis-server gets --protected-mode no (last, so it holds).
set -eu
if [ "${1:-}" = redis-server ]; then
  set -- "$@" --protected-mode no
fi
exec "$@"
