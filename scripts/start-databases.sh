#!/usr/bin/env bash
# Start the local PostgreSQL (whichever version is installed) and MariaDB servers
# and create the test roles and databases. Idempotent: safe to run again while the servers are already up.
# Needs root (it installs packages with apt-get when something is missing).
set -euo pipefail

log() { printf '[databases] %s\n' "$*"; }

need_apt=()
command -v mariadbd >/dev/null 2>&1 || need_apt+=(mariadb-server)
dpkg -s libmariadb-dev >/dev/null 2>&1 || need_apt+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v pg_ctlcluster >/dev/null 2>&1 || need_apt+=(postgresql)
if [ "${ARCATURE_BROWSER:-1}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing with apt-get: ${need_apt[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}" >/dev/null
fi

# --- PostgreSQL -------------------------------------------------------------
pg_version=$(pg_lsclusters -h | awk 'NR==1{print $1}')
pg_cluster=$(pg_lsclusters -h | awk 'NR==1{print $2}')
if [ -z "$pg_version" ]; then
  log "no PostgreSQL cluster found; creating one"
  pg_version=$(ls /usr/lib/postgresql | sort -n | tail -1)
  pg_cluster=main
  pg_createcluster "$pg_version" main >/dev/null
fi
if ! pg_lsclusters -h | awk '{print $4}' | grep -q online; then
  log "starting PostgreSQL $pg_version/$pg_cluster"
  pg_ctlcluster "$pg_version" "$pg_cluster" start
fi
for _ in $(seq 1 30); do
  su postgres -c "psql -qAtc 'select 1'" >/dev/null 2>&1 && break
  sleep 1
done
su postgres -c "psql -qAt" <<'SQL' >/dev/null
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'arcature') THEN
    CREATE ROLE arcature LOGIN PASSWORD 'arcature' CREATEDB;
  END IF;
END $$;
SQL
su postgres -c "psql -qAtc \"select 1 from pg_database where datname='arcature'\"" | grep -q 1 \
  || su postgres -c "createdb -O arcature arcature"
log "PostgreSQL ready: postgres://arcature:arcature@127.0.0.1:5432/arcature"

# --- MariaDB ----------------------------------------------------------------
mysql_ping() { mariadb-admin --protocol=socket -uroot ping >/dev/null 2>&1; }
if ! mysql_ping; then
  log "starting MariaDB"
  install -d -o mysql -g mysql /run/mysqld
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  (setsid mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
      --bind-address=127.0.0.1 --port=3306 >/var/log/arcature-mariadb.log 2>&1 &)
  for _ in $(seq 1 60); do mysql_ping && break; sleep 1; done
  mysql_ping || { log "MariaDB did not start; see /var/log/arcature-mariadb.log"; tail -20 /var/log/arcature-mariadb.log; exit 1; }
fi
mariadb --protocol=socket -uroot <<'SQL'
CREATE USER IF NOT EXISTS 'arcature'@'127.0.0.1' IDENTIFIED BY 'arcature';
CREATE USER IF NOT EXISTS 'arcature'@'localhost' IDENTIFIED BY 'arcature';
CREATE DATABASE IF NOT EXISTS arcature CHARACTER SET utf8mb4;
GRANT ALL PRIVILEGES ON *.* TO 'arcature'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'arcature'@'localhost';
FLUSH PRIVILEGES;
SQL
log "MariaDB ready: mysql://arcature:arcature@127.0.0.1:3306/arcature"
