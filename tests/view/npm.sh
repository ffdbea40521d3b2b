# npm packages for the tests that check ferry's output with outside tools (tests/view/run.sh,
# tests/record/record_test.sh --independent), sourced by them. They are installed into a folder
# of the build tree, never globally, once for all the tests that share the folder (serialised
# with flock: ctest runs them side by side), into a staging folder that replaces the installed
# one only when the install is complete.
#
# Each call either returns with the packages installed or prints one line "SKIP: why" and exits
# 77, quickly: when node is older than the packages need, when the registry does not answer a
# 10 s probe, or when the install fails or does not finish within its time (which the caller
# keeps below its ctest TIMEOUT). A failure is remembered for two minutes, so that the other
# tests sharing the folder skip at once instead of waiting as long again.

# npm_need_node MAJOR: skips unless node is there and at least version MAJOR.
npm_need_node() {
    local v
    command -v node >/dev/null || npm_skip "no node"
    command -v npm >/dev/null || npm_skip "no npm"
    v=$(node --version 2>/dev/null) || npm_skip "node does not run"
    v=${v#v}
    [ "${v%%.*}" -ge "$1" ] 2>/dev/null ||
        npm_skip "node $v is older than $1, which the pinned npm packages need"
}

npm_skip() {
    echo "SKIP: $*"
    exit 77
}

# npm_install DIR INSTALL_TIMEOUT_S PACKAGE@VERSION...: DIR/node_modules holds exactly these
# packages (DIR/installed names them), or the caller is skipped.
npm_install() {
    local dir=$1 limit=$2 rc
    shift 2
    local want="$*"
    mkdir -p "$dir"
    installed() { [ -d "$dir/node_modules" ] && [ "$(cat "$dir/installed" 2>/dev/null)" = "$want" ]; }
    installed && return 0
    (
        # Another test may be installing: it takes at most the probe and the install.
        flock -w $((limit + 20)) 9 || exit 4
        installed && exit 0
        # What failed a moment ago (for another test) fails again: no second wait.
        if [ -f "$dir/failed" ] && [ $(($(date +%s) - $(stat -c %Y "$dir/failed"))) -lt 120 ]; then
            exit 5
        fi
        rm -f "$dir/failed"
        # The probe: one small package's version, 10 s at most, no retries.
        timeout 10 npm view "ws@8" version --fetch-retries=0 --fetch-timeout=8000 \
            >"$dir/probe.log" 2>&1
        rc=$?
        if [ $rc -ne 0 ]; then
            local registry
            registry=$(npm config get registry 2>/dev/null)
            if [ $rc -eq 124 ]; then
                echo "the npm registry ($registry) did not answer within 10 s" >"$dir/failed"
            else
                echo "the npm registry ($registry) cannot be used: $(grep -m1 -e '^npm error' -e '^npm ERR!' "$dir/probe.log")" >"$dir/failed"
            fi
            exit 5
        fi
        rm -rf "$dir/stage"
        mkdir -p "$dir/stage"
        # --engine-strict against the node that runs the tests (npm may run on another).
        # shellcheck disable=SC2086
        timeout "$limit" npm install --no-save --no-audit --no-fund --no-package-lock \
            --prefer-offline --fetch-retries=1 --fetch-timeout=20000 --engine-strict \
            --node-version="$(node --version)" --prefix "$dir/stage" $want \
            >"$dir/install.log" 2>&1
        rc=$?
        if [ $rc -eq 124 ]; then
            echo "npm install did not finish within $limit s (a slow registry?)" >"$dir/failed"
            exit 5
        elif [ $rc -ne 0 ] && grep -q EBADENGINE "$dir/install.log"; then
            echo "an npm package needs another node than $(node --version): $(grep -m1 -A2 EBADENGINE "$dir/install.log" | tr '\n' ' ')" >"$dir/failed"
            exit 5
        elif [ $rc -ne 0 ]; then
            echo "npm install failed: $(tail -n 3 "$dir/install.log" | tr '\n' ' ')" >"$dir/failed"
            exit 5
        fi
        rm -rf "$dir/node_modules"
        mv "$dir/stage/node_modules" "$dir/node_modules" || exit 3
        rm -rf "$dir/stage"
        echo "$want" >"$dir/installed"
    ) 9>"$dir/.lock"
    rc=$?
    case $rc in
    0) return 0 ;;
    4) npm_skip "another test held the npm install of $dir for over $((limit + 20)) s" ;;
    5) npm_skip "$(head -c 400 "$dir/failed")" ;;
    *) npm_skip "npm install into $dir: exit $rc" ;;
    esac
}
