#!/usr/bin/env bash
# Start an MLflow tracking server for a team, bound to loopback.
#   tracking/serve.sh [--port 5000] [--backend-uri URI] [--artifacts DIR] [--workers 1] [-- MLFLOW-SERVER-OPTIONS...]
# Defaults: SQLite database tracking/mlflow.db and artifacts in tracking/artifacts.
# Pass a PostgreSQL URI (postgresql://user:pass@host/db) as --backend-uri for a shared store.
# Options after `--` go to `mlflow server` unchanged (e.g. -- --allowed-hosts mlflow.example.org).
# Prints the URI to export so that grrr-stream logs to this server.
#
# MLflow's GenAI job runner (a pool of huey consumers that grrr-stream never uses) is off
# unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true is set in the environment.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=5000
workers=1
backend="sqlite:///$here/mlflow.db"
artifacts="$here/artifacts"
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
need() { [ $# -ge 2 ] || { echo "option $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
        --port) need "$@"; port=$2; shift 2 ;;
        --backend-uri) need "$@"; backend=$2; shift 2 ;;
        --artifacts) need "$@"; artifacts=$2; shift 2 ;;
        --workers) need "$@"; workers=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$port" in ''|*[!0-9]*) echo "--port must be a number, got '$port'" >&2; exit 2 ;; esac
mlflow=${MLFLOW:-"$here/../.venv/bin/mlflow"}
[ -x "$mlflow" ] || mlflow=mlflow
mkdir -p "$artifacts"
artifacts=$(cd "$artifacts" && pwd)  # absolute: the server resolves it, not the caller's cwd
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}
echo "export MLFLOW_TRACKING_URI=http://127.0.0.1:$port"
exec "$mlflow" server --host 127.0.0.1 --port "$port" --workers "$workers" --backend-store-uri "$backend" \
    --artifacts-destination "$artifacts" --serve-artifacts "$@"
