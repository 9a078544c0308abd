#!/usr/bin/env bash
# Start / stop the throw-away services the tests use: PostgreSQL and moto_server, both on 127.0.0.1.
# Usage: scripts/services.sh up|down   (up prints `export` lines to eval)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${RAGTRAIL_SERVICES_DIR:-/tmp/ragtrail-services-$(id -u)}"
PG_PORT="${RAGTRAIL_TEST_PG_PORT:-54329}"
S3_PORT="${RAGTRAIL_TEST_S3_PORT:-54330}"
mkdir -p "$STATE"

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
  return 1
}

ensure_postgres_installed() {
  pg_bin >/dev/null 2>&1 && return
  echo "installing PostgreSQL from apt" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq postgresql >&2
}

pg_up() {
  ensure_postgres_installed
  local bin; bin="$(pg_bin)"
  local data="$STATE/pgdata" run_as=()
  # PostgreSQL refuses to run as root: run it as the 'postgres' system user then.
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home "$STATE" postgres
    chown -R postgres "$STATE"
    run_as=(runuser -u postgres --)
  fi
  if [ ! -s "$data/PG_VERSION" ]; then
    "${run_as[@]}" "$bin/initdb" -D "$data" -U ragtrail --auth=trust -E UTF8 >/dev/null
  fi
  if ! "${run_as[@]}" "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$STATE/pg.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $STATE -c fsync=off" start >/dev/null
  fi
  "${run_as[@]}" "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U ragtrail -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='ragtrail_test'" | grep -q 1 ||
    "${run_as[@]}" "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U ragtrail ragtrail_test
  echo "export RAGTRAIL_TEST_PG_URL=postgresql+psycopg://ragtrail@127.0.0.1:$PG_PORT/ragtrail_test"
}

pg_down() {
  local bin; bin="$(pg_bin 2>/dev/null)" || return 0
  [ -s "$STATE/pgdata/PG_VERSION" ] || return 0
  local run_as=(); [ "$(id -u)" = 0 ] && run_as=(runuser -u postgres --)
  "${run_as[@]}" "$bin/pg_ctl" -D "$STATE/pgdata" -m fast stop >/dev/null 2>&1 || true
}

s3_up() {
  local moto="$ROOT/.venv/bin/moto_server"
  if [ -f "$STATE/moto.pid" ] && kill -0 "$(cat "$STATE/moto.pid")" 2>/dev/null; then :; else
    nohup "$moto" -H 127.0.0.1 -p "$S3_PORT" >"$STATE/moto.log" 2>&1 &
    echo $! >"$STATE/moto.pid"
    for _ in $(seq 1 50); do
      curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/" && break
      sleep 0.2
    done
  fi
  echo "export RAGTRAIL_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT"
}

s3_down() {
  if [ -f "$STATE/moto.pid" ]; then
    kill "$(cat "$STATE/moto.pid")" 2>/dev/null || true
    rm -f "$STATE/moto.pid"
  fi
}

case "${1:-}" in
  up) pg_up; s3_up ;;
  down) s3_down; pg_down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
