#!/usr/bin/env bash
# ./spark-submit.sh <job> [--master M] [--conf k=v ...] [job options]   (--help lists the jobs)
# Submits jobs/<job>.py with the cached jars and conf/spark-defaults.conf; see tools/submit.py.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || { echo "error: .venv missing: run the set-up first (make setup)" >&2; exit 2; }
exec .venv/bin/python -m tools.submit "$@"
