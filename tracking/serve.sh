#!/usr/bin/env bash
# Start an MLflow tracking server for a team, bound to loopback.
#   tracking/serve.sh [--port 5000] [--backend-uri URI] [--artifacts DIR]
# Defaults: SQLite database tracking/mlflow.db and artifacts in tracking/artifacts.
# Pass a PostgreSQL URI (postgresql://user:pass@host/db) as --backend-uri for a shared store.
# Prints the URI to export so that grrr-stream logs to this server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=5000
backend="sqlite:///$here/mlflow.db"
artifacts="$here/artifacts"
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port=$2; shift 2 ;;
        --backend-uri) backend=$2; shift 2 ;;
        --artifacts) artifacts=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mlflow=${MLFLOW:-"$here/../.venv/bin/mlflow"}
[ -x "$mlflow" ] || mlflow=mlflow
mkdir -p "$artifacts"
echo "export MLFLOW_TRACKING_URI=http://127.0.0.1:$port"
exec "$mlflow" server --host 127.0.0.1 --port "$port" --backend-store-uri "$backend" \
    --artifacts-destination "$artifacts" --serve-artifacts
