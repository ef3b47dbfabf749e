#!/usr/bin/env bash
# Throwaway Redis and MariaDB for the test suite (Debian, as root; no systemd needed).
#   eval "$(bash scripts/services.sh start DIR)"   prints export lines for the test env
#   bash scripts/services.sh stop DIR
# Both servers listen on 127.0.0.1 on free ports and keep all state under DIR.
set -euo pipefail
cmd=${1:-start}
STATE=${2:-${TMPDIR:-/tmp}/taskcast-services}
SOCK=$STATE/mysql.sock

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

ensure_packages() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  command -v nginx >/dev/null || missing+=(nginx)  # tests/transports/test_nginx.py (its own throwaway nginx)
  command -v promtool >/dev/null || missing+=(prometheus)  # tests/operations/test_alerts.py (promtool)
  # tests/gateway/consumers (a throwaway cluster and server of their own, tests/helpers/brokers.py)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
  command -v nats-server >/dev/null || missing+=(nats-server)
  # tests/loadtest (the benchmarks' C load client, built with zlib; taskset pins it)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  [ -e /usr/include/zlib.h ] || missing+=(zlib1g-dev)
  command -v taskset >/dev/null || missing+=(util-linux)
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2
  fi
}

start() {
  ensure_packages
  mkdir -p "$STATE"
  local rport dport
  rport=$(free_port); dport=$(free_port)
  redis-server --daemonize yes --bind 127.0.0.1 --port "$rport" --save '' --appendonly no \
    --dir "$STATE" --pidfile "$STATE/redis.pid" --logfile "$STATE/redis.log" >&2
  for _ in $(seq 1 100); do redis-cli -h 127.0.0.1 -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  rm -rf "$STATE/mysql-data"
  mariadb-install-db --no-defaults --datadir="$STATE/mysql-data" --user=root \
    --auth-root-authentication-method=normal --skip-test-db >"$STATE/mariadb-install-db.log" 2>&1
  (mariadbd --no-defaults --datadir="$STATE/mysql-data" --socket="$SOCK" --port="$dport" \
    --bind-address=127.0.0.1 --user=root --pid-file="$STATE/mysql.pid" --log-error="$STATE/mysql.err" \
    --skip-name-resolve --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
    --innodb-buffer-pool-size=128M --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 \
    --max-connections=500 >/dev/null 2>&1 &)
  for _ in $(seq 1 300); do mariadb-admin --no-defaults --socket="$SOCK" -uroot ping >/dev/null 2>&1 && break; sleep 0.1; done
  mariadb --no-defaults --socket="$SOCK" -uroot <<SQL
CREATE DATABASE IF NOT EXISTS taskcast CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'taskcast'@'127.0.0.1' IDENTIFIED BY 'taskcast';
GRANT ALL PRIVILEGES ON *.* TO 'taskcast'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
  echo "$rport" > "$STATE/redis.port"; echo "$dport" > "$STATE/mysql.port"
  echo "export TASKCAST_TEST_REDIS_URL=redis://127.0.0.1:$rport/0"
  echo "export TASKCAST_TEST_MYSQL_URL=mysql+asyncmy://taskcast:taskcast@127.0.0.1:$dport/taskcast?charset=utf8mb4"
}

stop() {
  [ -f "$STATE/redis.port" ] && redis-cli -h 127.0.0.1 -p "$(cat "$STATE/redis.port")" shutdown nosave >/dev/null 2>&1 || true
  mariadb-admin --no-defaults --socket="$SOCK" -uroot shutdown >/dev/null 2>&1 || true
}

"$cmd"
