#!/usr/bin/env bash
# Lint and types (part of `make test`): ruff over the whole tree with pyproject.toml's rules,
# mypy over the packages [tool.mypy] names (core strict). Prints each finding; exits non-zero
# on any.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
.venv/bin/ruff check --output-format concise . || status=1
.venv/bin/mypy --no-error-summary || status=1
[ "$status" = 0 ] && echo "check: ruff and mypy clean"
exit $status
