#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Formats every tracked C++ file with the repository's .clang-format (CI checks this).
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' | xargs clang-format -i
