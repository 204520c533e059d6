#!/usr/bin/env bash
# Builds the Python package from the repository with the one command a user
# runs (pip install ./python) and runs its tests. In CI the build reuses the
# test build's dependencies (the dev profile); a user's install is a release
# build.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "pytest>=7"
MATURIN_PEP517_ARGS="${MATURIN_PEP517_ARGS:---profile dev}" \
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --force-reinstall ./python
python3 -m pytest -q python/tests
