#!/usr/bin/env bash
# Start / stop the throw-away services the tests use, all on 127.0.0.1: PostgreSQL, moto_server (S3)
# and Redis (the Celery broker of tests/system/test_celery_topology.py). Missing servers are
# installed from apt. `up` is idempotent (a running service is left as it is).
# Redis' variables are TEST_REDIS_PORT / TEST_REDIS_URL: ragtrail refuses RAGTRAIL_* variables
# that ragtrail.config_checks does not list, and every test process sees this environment.
# Usage: scripts/services.sh up|down   (up prints `export` lines to eval)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${RAGTRAIL_SERVICES_DIR:-/tmp/ragtrail-services-$(id -u)}"
PG_PORT="${RAGTRAIL_TEST_PG_PORT:-54329}"
S3_PORT="${RAGTRAIL_TEST_S3_PORT:-54330}"
REDIS_PORT="${TEST_REDIS_PORT:-54331}"
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

ensure_redis_installed() {
  command -v redis-server >/dev/null 2>&1 && return
  echo "installing Redis from apt" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq redis-server >&2
}

redis_alive() {
  [ -f "$STATE/redis.pid" ] && kill -0 "$(cat "$STATE/redis.pid")" 2>/dev/null
}

# Loopback only, no persistence (no RDB snapshots, no AOF): a broker for throw-away stacks.
redis_up() {
  ensure_redis_installed
  if ! redis_alive; then
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
      --save "" --appendonly no --dir "$STATE" --daemonize yes \
      --pidfile "$STATE/redis.pid" --logfile "$STATE/redis.log" >/dev/null
    for _ in $(seq 1 50); do
      redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
      sleep 0.2
    done
  fi
  echo "export TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"
}

redis_down() {
  if redis_alive; then
    local pid; pid="$(cat "$STATE/redis.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$STATE/redis.pid"
}

case "${1:-}" in
  up) pg_up; s3_up; redis_up ;;
  down) redis_down; s3_down; pg_down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
