#!/usr/bin/env bash
# Runs doxygen with docs/Doxyfile, as `make docs` does, into a temporary directory and fails on
# any warning or error (undocumented declarations included) or when no HTML index was written.
# usage: docs_test.sh SOURCE_DIR
# Exit status: 0 passed, 1 failed, 77 skipped (no doxygen).
set -u

SRC=${1:-}
if [ -z "$SRC" ] || [ ! -f "$SRC/docs/Doxyfile" ]; then
    echo "docs_test.sh: FAIL: no docs/Doxyfile in '$SRC'" >&2
    exit 1
fi
if ! command -v doxygen >/dev/null 2>&1; then
    echo "docs_test: skipped, doxygen is not installed"
    exit 77
fi

T=$(mktemp -d /tmp/ferry-docs-test-XXXXXX)
trap 'rm -rf "$T"' EXIT

# The Doxyfile's paths are relative to the repository root; FERRY_DOCS_OUT is its output dir.
(cd "$SRC" && FERRY_DOCS_OUT=$T/out doxygen docs/Doxyfile) >"$T/log" 2>&1
rc=$?
problems=$(grep -ciE 'warning:|error:' "$T/log")
if [ "$rc" -ne 0 ] || [ "$problems" -ne 0 ]; then
    echo "docs_test.sh: FAIL: doxygen exited $rc with $problems warnings or errors:" >&2
    cat "$T/log" >&2
    exit 1
fi
if [ ! -s "$T/out/html/index.html" ]; then
    echo "docs_test.sh: FAIL: doxygen wrote no html/index.html" >&2
    cat "$T/log" >&2
    exit 1
fi
echo "docs_test: passed ($(doxygen --version), 0 warnings)"
