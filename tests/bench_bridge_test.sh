#!/usr/bin/env bash
# `ferry bench bridge --quick` end to end: the table (every row measured, losses reported, a
# line per size and the 2.76 MB verdict), the CSV, and that the namespaces (their holder
# processes), the veth pair, the ferry directories and the raised net.core limits are gone
# afterwards, also after SIGINT; and that nothing is made under /run/netns or /tmp.
# usage: bench_bridge_test.sh PATH_TO_FERRY
# Exit status: 0 passed, 1 failed, 77 skipped (no bridge built, not root, no ip).
set -u

FERRY=${1:-}
skip() {
    echo "SKIP: $*"
    exit 77
}
[ -n "$FERRY" ] && [ -x "$FERRY" ] || skip "no ferry executable at '$FERRY'"
"$FERRY" bridge --help >/dev/null 2>&1 || skip "ferry was built without the DDS bridge"
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
command -v ip >/dev/null 2>&1 || skip "needs ip (iproute2)"
# The probe makes an anonymous namespace: `ip netns add` would mount /run/netns and leave it.
unshare -n true 2>/dev/null || skip "cannot create network namespaces (unshare -n)"

T=$(mktemp -d /tmp/ferry-bench-bridge-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
FAILS=0
fail() {
    echo "FAIL: $*"
    FAILS=$((FAILS + 1))
}

# gone OUT TOKEN: what the run whose command line has TOKEN (its output OUT) made no longer
# exists: no process of it (the namespaces' holders are its children, with its command line, and
# a namespace goes with its holder), no veth of its name, no directory of it, nothing new under
# /run/netns or /tmp.
gone() {
    local ns left
    ns=$(sed -n 's/.*ns \(fbb[0-9]*[AB]\).*/\1/p' "$1" | head -1)
    [ -n "$ns" ] || { fail "no namespace name in the output"; return; }
    ns=${ns%?}
    sleep 0.5 # the kernel delivers the holders' SIGKILL
    left=$(pgrep -f -- "$2")
    [ -z "$left" ] && echo "ok: no process of the run left" ||
        fail "processes of the run left (expected none): $(ps -o pid=,args= -p "$(echo $left | tr ' ' ,)")"
    ip -o link | grep -q "$ns" && fail "veth $ns* left behind: $(ip -o link | grep "$ns")"
    ls /dev/shm /tmp 2>/dev/null | grep -q '^ferry-bbench-' && fail "ferry-bbench-* directories left behind"
    [ "$(ls -A /run/netns 2>/dev/null)" = "$NETNS_BEFORE" ] ||
        fail "/run/netns changed: $(ls -A /run/netns 2>/dev/null), was: $NETNS_BEFORE"
    [ "$(findmnt -rn /run/netns | wc -l)" = "$NETNS_MOUNTS_BEFORE" ] ||
        fail "mounts on /run/netns: $(findmnt -rn /run/netns | wc -l), were $NETNS_MOUNTS_BEFORE"
    [ "$(ls -A /tmp | grep -c '^ferry-bridge-large-test.lock$')" = "$LOCKFILE_BEFORE" ] ||
        fail "a lock file was left in /tmp"
}
NETNS_BEFORE=$(ls -A /run/netns 2>/dev/null)
NETNS_MOUNTS_BEFORE=$(findmnt -rn /run/netns | wc -l)
LOCKFILE_BEFORE=$(ls -A /tmp | grep -c '^ferry-bridge-large-test.lock$')

# The limits are global and the bridge's large-frame tests raise them too, under the lock the
# benchmark takes as well (a flock on the limit's own file): read them only while holding that
# lock, when nobody has them raised.
LOCK=/proc/sys/net/core/rmem_max
limits() {
    (
        flock -w 90 9 || exit 1
        echo "$(sysctl -n net.core.rmem_max) $(sysctl -n net.core.wmem_max)"
    ) 9<"$LOCK"
}

"$FERRY" bench bridge --bogus >/dev/null 2>&1
[ $? = 2 ] || fail "an unknown option should exit 2"

before=$(limits) || fail "cannot take $LOCK"
timeout -s INT 150 "$FERRY" bench bridge --quick --csv "$T/b.csv" >"$T/out" 2>"$T/err"
rc=$?
cat "$T/out"
[ $rc = 0 ] || { fail "exit status $rc"; tail -20 "$T/err"; }
grep -q '^ *size B .*path .*p50 us .*p99 us .*max us .*msgs/s .*MB/s .*lost$' "$T/out" || fail "no table header"
for size in 64 2764800 6220800; do
    for path in plain-dds bridged; do
        n=$(grep -cE "^ *$size .* $path +(100|30) Hz|^ *$size .* $path +flat/" "$T/out")
        [ "$n" = 2 ] || fail "$size $path: $n rows, want 2 (paced and flat)"
    done
    grep -qE "^ *$size B: p50 [0-9.]+x" "$T/out" || fail "no ratio line for $size B"
done
grep -q ' error$' "$T/out" && fail "a row failed"
# Reliable DDS and a bounded window lose nothing on an idle veth; a busy machine can make a
# writer give up on a frame now and then, so only a large loss fails.
awk -F, 'NR > 1 && $9 > 0 { print "note: " $1 " B " $3 " " $4 ": " $9 " of " $7 " lost" }
         NR > 1 && $8 * 2 < $7 { bad = 1 } END { exit bad }' "$T/b.csv" || fail "more than half lost"
grep -qE '^  \[(pass|miss)\] the bridge adds under 10% to plain DDS p50 latency at 2,764,800 B' "$T/out" ||
    fail "no verdict at 2,764,800 B"
[ "$(head -1 "$T/b.csv")" = "size_bytes,image,path,mode,rate_hz,window,sent,received,lost,p50_us,p99_us,max_us,msgs_per_s,mb_per_s" ] ||
    fail "CSV header"
[ "$(tail -n +2 "$T/b.csv" | wc -l)" = 12 ] || fail "CSV rows: $(tail -n +2 "$T/b.csv" | wc -l), want 12"
awk -F, 'NR > 1 && ($8 <= 0 || $10 <= 0 || $13 <= 0) { bad = 1 } END { exit bad }' "$T/b.csv" ||
    fail "a CSV row without messages, latency or rate"
gone "$T/out" "$T/b.csv"
[ "$(limits)" = "$before" ] || fail "net.core.rmem_max / wmem_max not restored: $(limits), was $before"

# Interrupted mid-run: cleaned up all the same, exit 130.
"$FERRY" bench bridge --quick --csv "$T/int.csv" >"$T/int" 2>&1 &
pid=$!
for _ in $(seq 300); do
    grep -q 'plain-dds' "$T/int" && break
    sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || fail "after SIGINT: exit status $rc, want 130"
gone "$T/int" "$T/int.csv"
[ "$(limits)" = "$before" ] || fail "limits not restored after SIGINT: $(limits), was $before"

[ $FAILS = 0 ] && echo "PASS" || echo "FAILED: $FAILS"
[ $FAILS = 0 ]
