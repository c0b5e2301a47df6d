#!/bin/sh
# Creates or upgrades Temporal's two PostgreSQL databases (temporal,
# temporal_visibility) with the schema files shipped in the admin-tools image.
# Idempotent: an existing database is only brought up to date. It never runs
# `setup-schema` on a database that already has one (that would reset its
# recorded schema version).
#
# Runs in temporalio/admin-tools (sh, no bash). Connection from SQL_HOST,
# SQL_PORT, SQL_USER; the password from SQL_PASSWORD (read by the tool from the
# environment, never on a command line).
set -eu

: "${SQL_HOST:?SQL_HOST is required}"
: "${SQL_USER:?SQL_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
port="${SQL_PORT:-5432}"
schemas="${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}"

sql_tool() {
  database="$1"
  shift
  temporal-sql-tool --plugin postgres12 --ep "$SQL_HOST" --port "$port" --user "$SQL_USER" \
    --database "$database" "$@"
}

for pair in temporal:temporal temporal_visibility:visibility; do
  database="${pair%%:*}"
  versioned="$schemas/${pair##*:}/versioned"
  if sql_tool "$database" update-schema --schema-dir "$versioned"; then
    echo "$database: schema up to date"
    continue
  fi
  echo "$database: no schema yet; creating it"
  # Fails harmlessly when the database exists without a schema; a real failure
  # (permissions, connection) makes setup-schema below fail and stops the script.
  sql_tool "$database" create-database || echo "$database: create-database failed; trying setup"
  sql_tool "$database" setup-schema --version 0.0
  sql_tool "$database" update-schema --schema-dir "$versioned"
done
echo "Temporal schemas ready"
