# Shared by the bridge tests: sourced with "$FERRY" and the plain programs' directory as $1 $2.
# Gives each test network namespaces, veth pairs and ferry directories of its own, all removed
# by an EXIT trap, also on failure.
set -u

FERRY=$1
PLAIN=${2:-none}
skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
note() { echo "-- $*"; }

"$FERRY" bridge --help >/dev/null 2>&1 || skip "ferry was built without the DDS bridge"
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null 2>&1 || skip "needs ip (iproute2)"

TAG="fb$$$RANDOM"
TAG=${TAG:0:10}
WORK=$(mktemp -d /tmp/ferry-bridge-test.XXXXXX) || fail "mktemp"
NSES=()
PIDS=()
SYSCTL_RESTORE=()

cleanup() {
    local p ns kv
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    for ns in "${NSES[@]}"; do ip netns del "$ns" 2>/dev/null; done
    for kv in "${SYSCTL_RESTORE[@]}"; do sysctl -q -w "$kv" >/dev/null 2>&1; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# new_ns VAR NAME: creates a namespace with loopback up (multicast on, so Cyclone can discover
# over it) and stores its name in VAR. Not in a $(...) subshell: the name must reach NSES here.
new_ns() {
    local ns="${TAG}$2"
    ip netns add "$ns" 2>/dev/null || skip "cannot create network namespaces"
    NSES+=("$ns")
    # In a chroot (/ not a mount point) the namespace is made but `ip netns exec` cannot enter it.
    ip netns exec "$ns" true 2>/dev/null || skip "cannot enter network namespaces (ip netns exec)"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set lo multicast on
    printf -v "$1" '%s' "$ns"
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
    ip -n "$1" addr add "$IP_A/24" dev "$VETH_A"
    ip -n "$2" addr add "$IP_B/24" dev "$VETH_B"
    ip -n "$1" link set "$VETH_A" up multicast on
    ip -n "$2" link set "$VETH_B" up multicast on
}

# in NS CMD...: runs a command in a namespace.
in_ns() {
    local ns=$1
    shift
    ip netns exec "$ns" "$@"
}

# bg NS LOG CMD...: starts a command in a namespace in the background; sets LAST_PID.
bg() {
    local ns=$1 log=$2
    shift 2
    ip netns exec "$ns" "$@" >"$log" 2>&1 &
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

# seqs_over FILE MIN [KEY]: how many "KEY=N" fields (default seq) with N > MIN, and how many of
# those repeat. KEY frame: the source frame numbers of `ferry echo --verify`, which survive the
# bridges (seq is the republishing bridge's own).
seqs_over() {
    awk -v min="$2" -v key="${3:-seq}=" '{ for (i = 1; i <= NF; i++)
        if (index($i, key) == 1) { s = substr($i, length(key) + 1) + 0;
        if (s > min) { n++; if (seen[s]++) d++ } } } END { printf "%d %d\n", n, d }' "$1"
}

# raise_socket_limits: net.core.rmem_max / wmem_max to 64 MiB so Cyclone gets the socket buffers
# the bridge asks for; the old values come back at exit (SYSCTL_RESTORE). The limits are global:
# one such test at a time on the machine, also across ctest runs (the lock is held until exit).
raise_socket_limits() {
    local k old
    exec 9>/tmp/ferry-bridge-large-test.lock
    flock -w 45 9 || skip "another large-frame bridge test holds the machine"
    for k in net.core.rmem_max net.core.wmem_max; do
        old=$(sysctl -n "$k" 2>/dev/null) || skip "cannot read $k"
        if [ "$old" -lt 67108864 ]; then
            sysctl -q -w "$k=67108864" >/dev/null || skip "cannot set $k"
            SYSCTL_RESTORE+=("$k=$old")
        fi
    done
}

# loss TEXT: a frame lost where a timed test wants none. A sanitizer build (ctest sets
# FERRY_BRIDGE_TEST_SANITIZED) is several times slower than the frame rates these tests run at:
# there, loss is reported but not a failure, and the tests check integrity only.
loss() {
    if [ "${FERRY_BRIDGE_TEST_SANITIZED:-0}" = 1 ]; then
        echo "note (sanitizer build, timing not checked): $*"
    else
        echo "LOSS: $*"
        status=1
    fi
}
