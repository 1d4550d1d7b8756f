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
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || need_apt+=(pgbouncer)
# tests/unit/test_translations.py runs makemessages and msgfmt against the shipped catalogues.
command -v msgfmt >/dev/null 2>&1 || need_apt+=(gettext)
if [ "${ARCATURE_BROWSER:-1}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
  # npm installs axe-core for the accessibility test (scripts/install-axe.sh).
  command -v npm >/dev/null 2>&1 || need_apt+=(npm)
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

# --- PgBouncer (transaction pooling, in front of the PostgreSQL above) ---------
# Our own configuration under /etc/pgbouncer/arcature.ini, not the package's:
# every database name is passed through (the tests create theirs), and the pool
# is transaction mode, the setting that breaks session state and LISTEN.
pgb_dir=/etc/pgbouncer
install -d -o postgres -g postgres /run/arcature-pgbouncer
cat > "$pgb_dir/arcature.ini" <<'INI'
[databases]
* = host=127.0.0.1 port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir = /run/arcature-pgbouncer
auth_type = scram-sha-256
auth_file = /etc/pgbouncer/arcature-users.txt
pool_mode = transaction
max_client_conn = 400
default_pool_size = 40
ignore_startup_parameters = extra_float_digits,options
pidfile = /run/arcature-pgbouncer/pgbouncer.pid
logfile = /var/log/arcature-pgbouncer.log
admin_users = arcature
INI
printf '"arcature" "arcature"\n' > "$pgb_dir/arcature-users.txt"
chown postgres:postgres "$pgb_dir/arcature.ini" "$pgb_dir/arcature-users.txt"
chmod 640 "$pgb_dir/arcature-users.txt"
touch /var/log/arcature-pgbouncer.log && chown postgres:postgres /var/log/arcature-pgbouncer.log
pgb_ping() { PGPASSWORD=arcature psql -h 127.0.0.1 -p 6432 -U arcature -d postgres -qAtc 'select 1' >/dev/null 2>&1; }
if ! pgb_ping; then
  log "starting PgBouncer (transaction pooling) on 127.0.0.1:6432"
  su postgres -s /bin/sh -c "/usr/sbin/pgbouncer -d $pgb_dir/arcature.ini"
  for _ in $(seq 1 30); do pgb_ping && break; sleep 0.5; done
  pgb_ping || { log "PgBouncer did not start; see /var/log/arcature-pgbouncer.log"; tail -20 /var/log/arcature-pgbouncer.log; exit 1; }
fi
log "PgBouncer ready: postgres://arcature:arcature@127.0.0.1:6432/arcature (transaction mode)"

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
