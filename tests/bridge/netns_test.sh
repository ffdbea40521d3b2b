#!/usr/bin/env bash
# Two "hosts" (network namespaces joined by a veth pair, each with its own ferry directory):
# host A's ferry publisher -> bridge A -> DDS over the veth -> bridge B -> host B's ferry
# subscriber, checksums verified; and the same from B to A at the same time.
source "$(dirname "$0")/lib.sh"

new_ns NSA A
new_ns NSB B
veth "$NSA" "$NSB" "10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
DA=$WORK/a
DB=$WORK/b

bg "$NSA" "$WORK/bridge_a.log" "$FERRY" bridge --dir "$DA" --config "$(veth_config "$VETH_A")" --stats --seconds 40
BA=$LAST_PID
bg "$NSB" "$WORK/bridge_b.log" "$FERRY" bridge --dir "$DB" --config "$(veth_config "$VETH_B")" --stats --seconds 40
BB=$LAST_PID

bg "$NSB" "$WORK/echo_b.log" "$FERRY" echo /cam/ab --dir "$DB" --type sensor_msgs/Image --verify --count 40 --timeout 20
EB=$LAST_PID
bg "$NSA" "$WORK/echo_a.log" "$FERRY" echo /cam/ba --dir "$DA" --type sensor_msgs/Image --verify --count 40 --timeout 20
EA=$LAST_PID
# The cameras run until the checks below are done: the bridges' inbound publishers, which they
# look at, live as long as the cameras' routes do.
bg "$NSA" "$WORK/pub_a.log" "$FERRY" pub /cam/ab --dir "$DA" --image 640x480 --rate 30
PA=$LAST_PID
bg "$NSB" "$WORK/pub_b.log" "$FERRY" pub /cam/ba --dir "$DB" --image 320x240 --encoding mono8 --rate 30
PB=$LAST_PID

status=0
wait "$EB" || { status=1; echo "FAIL: A -> B: ferry echo exited with status $?: $(tail -n 1 "$WORK/echo_b.log")"; }
wait "$EA" || { status=1; echo "FAIL: B -> A: ferry echo exited with status $?: $(tail -n 1 "$WORK/echo_a.log")"; }
tail -n 2 "$WORK/echo_b.log" "$WORK/echo_a.log"

# Nothing held: each bridge's inbound publisher has no chunk in use once its subscriber left
# (ferry echo returns what it holds when it exits; the publisher takes it back at its next
# publication, so give it a few frame periods).
sleep 0.5
for side in "$DB /cam/ab" "$DA /cam/ba"; do
    set -- $side
    in_use=$(info_field "$1" "$2" "sum(p['chunks_in_use'] for p in j['publishers'] if p['alive'])" 2>&1)
    check "$2 in $1: chunks_in_use of the bridge's publisher" "$in_use" 0 \
        "$(info_field "$1" "$2" "[(p['node_name'], p['alive'], p['chunks_in_use']) for p in j['publishers']]" 2>&1)"
done

kill -TERM "$PA" "$PB"
wait "$PA" "$PB"
kill -TERM "$BA" "$BB"
wait "$BA" || { status=1; echo "FAIL: bridge A exited with status $?"; }
wait "$BB" || { status=1; echo "FAIL: bridge B exited with status $?"; }
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log"
for log in "$WORK/bridge_a.log" "$WORK/bridge_b.log"; do
    for k in out_invalid in_invalid out_failed; do
        check "$(basename "$log" .log) $k" "$(stat_of "$log" $k)" 0 "$(grep 'losses:' "$log")"
    done
done
check_ge "bridge A out_written" "$(stat_of "$WORK/bridge_a.log" out_written)" 40
check_ge "bridge B in_published" "$(stat_of "$WORK/bridge_b.log" in_published)" 40
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
