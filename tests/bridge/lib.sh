# Shared by the bridge tests: sourced with "$FERRY" and the plain programs' directory as $1 $2.
# Gives each test network namespaces, veth pairs and ferry directories of its own, all removed
# by an EXIT trap, also on failure. The namespaces are anonymous (unshare -n, entered with
# nsenter): no `ip netns add`, so nothing under /run/netns (no mount of it) is made or left.
set -u

FERRY=$1
PLAIN=${2:-none}
T0=$(date +%s%3N)
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
note() { echo "-- $*"; }
# elapsed: seconds since the test started, for the log.
elapsed() { echo "$((($(date +%s%3N) - T0) / 1000)).$(printf %03d $((($(date +%s%3N) - T0) % 1000)))"; }

"$FERRY" bridge --help >/dev/null 2>&1 || skip "ferry was built without the DDS bridge"
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null 2>&1 || skip "needs ip (iproute2)"
command -v unshare >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 &&
    command -v setpriv >/dev/null 2>&1 || skip "needs unshare, nsenter and setpriv (util-linux)"

TAG="fb$$$RANDOM"
TAG=${TAG:0:10}
WORK=$(mktemp -d /tmp/ferry-bridge-test.XXXXXX) || fail "mktemp: cannot make a directory in /tmp"
NSES=()    # the pids of the processes that hold the namespaces
PIDS=()
SYSCTL_RESTORE=()

WATCHDOG=
cleanup() {
    local p kv
    [ -z "$WATCHDOG" ] || kill -TERM "$WATCHDOG" 2>/dev/null
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    # A namespace, with its veth end, goes with the last process in it: its holder.
    for p in "${NSES[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    for kv in "${SYSCTL_RESTORE[@]}"; do sysctl -q -w "$kv" >/dev/null 2>&1; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# ctest kills a test that overruns its TIMEOUT outright, and the EXIT trap would not run: a test
# that knows its timeout (FERRY_BRIDGE_TEST_TIMEOUT_S, from tests/bridge/CMakeLists.txt) stops
# itself 5 s before, says so, and cleans up.
if [ -n "${FERRY_BRIDGE_TEST_TIMEOUT_S:-}" ] && [ "$FERRY_BRIDGE_TEST_TIMEOUT_S" -gt 10 ]; then
    (
        sleep $((FERRY_BRIDGE_TEST_TIMEOUT_S - 5)) &
        s=$!
        trap 'kill $s 2>/dev/null; exit 0' TERM
        wait $s && echo "FAIL: still running after $((FERRY_BRIDGE_TEST_TIMEOUT_S - 5)) s (ctest's timeout: $FERRY_BRIDGE_TEST_TIMEOUT_S s); stopping" &&
            kill -TERM $$
    ) &
    WATCHDOG=$!
fi

# new_ns VAR NAME: creates a network namespace with loopback up (multicast on, so Cyclone can
# discover over it) and stores the pid of the process that holds it in VAR; in_ns, bg and veth
# take that pid. Not in a $(...) subshell: the pid must reach NSES here.
new_ns() {
    local pid i
    unshare -n true 2>/dev/null || skip "cannot create network namespaces (unshare -n)"
    # The holder dies with this shell, however it ends (--pdeathsig: even killed outright).
    setpriv --pdeathsig KILL unshare -n sleep 1000000 </dev/null >/dev/null 2>&1 &
    pid=$!
    NSES+=("$pid")
    # nsenter before unshare has made the namespace would enter the test's own.
    for i in $(seq 100); do
        [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] && break
        sleep 0.05
    done
    [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] ||
        fail "new_ns $2: the namespace of pid $pid did not come within 5 s"
    nsenter -t "$pid" -n true 2>/dev/null || skip "cannot enter network namespaces (nsenter -n)"
    nsenter -t "$pid" -n ip link set lo up || fail "new_ns $2: ip link set lo up failed"
    nsenter -t "$pid" -n ip link set lo multicast on || fail "new_ns $2: lo multicast on failed"
    printf -v "$1" '%s' "$pid"
}

# veth NS_A NS_B NET: a veth pair between two namespaces, NET.1 and NET.2 (/24), multicast on.
# Sets VETH_A VETH_B IP_A IP_B.
veth() {
    VETH_A="${TAG}a"
    VETH_B="${TAG}b"
    IP_A="$3.1"
    IP_B="$3.2"
    ip link add "$VETH_A" netns "$1" type veth peer name "$VETH_B" netns "$2" ||
        skip "cannot create a veth pair"
    in_ns "$1" ip addr add "$IP_A/24" dev "$VETH_A" || fail "ip addr add $IP_A/24 dev $VETH_A failed"
    in_ns "$2" ip addr add "$IP_B/24" dev "$VETH_B" || fail "ip addr add $IP_B/24 dev $VETH_B failed"
    in_ns "$1" ip link set "$VETH_A" up multicast on || fail "ip link set $VETH_A up failed"
    in_ns "$2" ip link set "$VETH_B" up multicast on || fail "ip link set $VETH_B up failed"
}

# in NS CMD...: runs a command in a namespace.
in_ns() {
    local ns=$1
    shift
    nsenter -t "$ns" -n "$@"
}

# bg NS LOG CMD...: starts a command in a namespace in the background; sets LAST_PID (nsenter
# execs the command: the pid is the command's).
bg() {
    local ns=$1 log=$2
    shift 2
    nsenter -t "$ns" -n "$@" >"$log" 2>&1 &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# stat_of FILE KEY: a counter from the last "ferry bridge: stats" line of a log.
stat_of() {
    grep 'ferry bridge: stats' "$1" | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# A DDS config for one end of a veth pair: that interface, unicast discovery of both ends.
veth_config() {
    echo "<CycloneDDS><Domain Id=\"any\"><General><Interfaces><NetworkInterface name=\"$1\"/></Interfaces></General><Discovery><Peers><Peer address=\"$IP_A\"/><Peer address=\"$IP_B\"/></Peers><ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>30</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
}

# info_json DIR TOPIC: `ferry info --json`, one object.
info_field() {
    # info_field DIR TOPIC PYTHON_EXPR (over j, the parsed object)
    "$FERRY" info "$2" --json --dir "$1" | python3 -c "import json,sys; j=json.load(sys.stdin); print($3)"
}


# raise_socket_limits: net.core.rmem_max / wmem_max to 64 MiB so Cyclone gets the socket buffers
# the bridge asks for; the old values come back at exit (SYSCTL_RESTORE). The limits are global:
# one such test at a time on the machine, also across ctest runs and with `ferry bench bridge`,
# which takes the same lock: a flock on /proc/sys/net/core/rmem_max itself (no lock file to
# leave behind), held until exit. A test waits for it up to LOCK_WAIT_S, then skips.
LOCK_WAIT_S=120
raise_socket_limits() {
    local k old
    exec 9</proc/sys/net/core/rmem_max || skip "cannot open /proc/sys/net/core/rmem_max"
    flock -w $LOCK_WAIT_S 9 ||
        skip "another large-frame bridge test or bridge benchmark held the socket limits for ${LOCK_WAIT_S} s"
    for k in net.core.rmem_max net.core.wmem_max; do
        old=$(sysctl -n "$k" 2>/dev/null) || skip "cannot read $k"
        if [ "$old" -lt 67108864 ]; then
            sysctl -q -w "$k=67108864" >/dev/null || skip "cannot set $k"
            SYSCTL_RESTORE+=("$k=$old")
        fi
    done
}

# loss TEXT: a frame lost where the bridge promises none. A sanitizer build (ctest sets
# FERRY_BRIDGE_TEST_SANITIZED) is several times slower than the frame rates these tests run at:
# there, loss is reported but not a failure, and the tests check integrity only.
loss() {
    if [ "${FERRY_BRIDGE_TEST_SANITIZED:-0}" = 1 ]; then
        echo "note (sanitizer build, losses not checked): $*"
    else
        echo "FAIL: LOSS: $*"
        status=1
    fi
}

# check LABEL GOT WANT [WHY]: GOT must equal WANT; a failure says both, and why it matters.
check() {
    if [ "$2" = "$3" ]; then
        echo "ok: $1 = $2"
    else
        echo "FAIL: $1: expected $3, got ${2:-nothing}${4:+ ($4)}"
        status=1
    fi
}

# check_le LABEL GOT MAX [WHY]: GOT must be a number at most MAX.
check_le() {
    if [ -n "$2" ] && [ "$2" -le "$3" ] 2>/dev/null; then
        echo "ok: $1 = $2 (at most $3)"
    else
        echo "FAIL: $1: expected at most $3, got ${2:-nothing}${4:+ ($4)}"
        status=1
    fi
}

# check_ge LABEL GOT MIN [WHY]: GOT must be a number at least MIN.
check_ge() {
    if [ -n "$2" ] && [ "$2" -ge "$3" ] 2>/dev/null; then
        echo "ok: $1 = $2 (at least $3)"
    else
        echo "FAIL: $1: expected at least $3, got ${2:-nothing}${4:+ ($4)}"
        status=1
    fi
}

# pub_field LOG WORD: from `ferry pub`'s summary line ("published N frames ..., dropped N,
# pool exhausted N, blocked N"), the number after WORD (published, dropped, exhausted, blocked).
pub_field() {
    sed -n "s/^ferry pub: [^ ]*:.* $2 \\([0-9]*\\).*/\\1/p" "$1" | head -1
}

# echo_field LOG WORD: from `ferry echo`'s summary, the number after WORD (received, dropped,
# corrupt).
echo_field() {
    sed -n "s/.*ferry echo: .* $2 \([0-9]*\).*/\1/p" "$1" | head -1
}

# frames_from_first LOG LAST [KEY]: over the "KEY=N" fields (default frame) of LOG: the first N,
# how many distinct N there are from it to LAST, how many came twice, and how many of
# first..LAST are missing. Prints "first count repeated missing" ("0 0 0 LAST" when none came).
frames_from_first() {
    awk -v last="$2" -v key="${3:-frame}=" '{ for (i = 1; i <= NF; i++)
        if (index($i, key) == 1) { s = substr($i, length(key) + 1) + 0;
            if (first == "" || s < first) first = s;
            if (seen[s]++) d++; else if (s <= last) n++ } }
        END { if (first == "") print 0, 0, 0, last; else print first, n, d + 0, last - first + 1 - n }' "$1"
}

# check_run LABEL LOG LAST MIN_RUN [KEY [DROPPED]]: a far end's frames (KEY=N fields, default
# frame) from its first to LAST: none twice, none missing but up to DROPPED (the subscriber's own
# queue drops, default 0), and at least MIN_RUN of them.
check_run() {
    local first n rep miss
    read -r first n rep miss < <(frames_from_first "$2" "$3" "${5:-frame}")
    echo "-- $1: frames $first..$3: $n, $miss missing, $rep repeated${6:+; its own queue dropped $6}"
    check "$1: frames that came twice" "$rep" 0
    check_le "$1: frames missing after its first ($first)" "$miss" "${6:-0}" \
        "${6:+only those its own queue dropped may be missing}"
    check_ge "$1: frames from its first to the last" "$n" "$4" "fewer means the route came very late or broke"
}

# wait_line LOG TEXT SECONDS: waits until LOG has a line with TEXT (grep -F); false when SECONDS
# went by first.
wait_line() {
    local until=$(($(date +%s) + $3))
    while ! grep -qF -- "$2" "$1" 2>/dev/null; do
        [ "$(date +%s)" -lt "$until" ] || return 1
        sleep 0.2
    done
}

# wait_frame LOG FRAME SECONDS [KEY]: waits until LOG has KEY=FRAME (default frame); false when
# SECONDS went by first.
wait_frame() {
    local until=$(($(date +%s) + $3))
    while ! grep -q "${4:-frame}=$2\b" "$1" 2>/dev/null; do
        [ "$(date +%s)" -lt "$until" ] || return 1
        sleep 0.2
    done
}
