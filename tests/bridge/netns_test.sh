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
bg "$NSA" "$WORK/pub_a.log" "$FERRY" pub /cam/ab --dir "$DA" --image 640x480 --rate 30 --count 150
PA=$LAST_PID
bg "$NSB" "$WORK/pub_b.log" "$FERRY" pub /cam/ba --dir "$DB" --image 320x240 --encoding mono8 --rate 30 --count 150
PB=$LAST_PID

status=0
wait "$EB" || { status=1; echo "A -> B: echo failed"; }
wait "$EA" || { status=1; echo "B -> A: echo failed"; }
wait "$PA" "$PB"
tail -n 2 "$WORK/echo_b.log" "$WORK/echo_a.log"

# Nothing held: each bridge's inbound publisher has no chunk in use once its subscriber left.
for side in "$DB /cam/ab" "$DA /cam/ba"; do
    set -- $side
    in_use=$(info_field "$1" "$2" "sum(p['chunks_in_use'] for p in j['publishers'] if p['alive'])")
    [ "$in_use" = 0 ] || { status=1; echo "$2 in $1: chunks_in_use $in_use"; }
done

kill -TERM "$BA" "$BB"
wait "$BA" || { status=1; echo "bridge A exited with an error"; }
wait "$BB" || { status=1; echo "bridge B exited with an error"; }
cat "$WORK/bridge_a.log" "$WORK/bridge_b.log"
for log in "$WORK/bridge_a.log" "$WORK/bridge_b.log"; do
    for k in out_invalid in_invalid out_failed; do
        [ "$(stat_of "$log" $k)" = 0 ] || { status=1; echo "$log: $k = $(stat_of "$log" $k)"; }
    done
done
[ "$(stat_of "$WORK/bridge_a.log" out_written)" -ge 40 ] || status=1
[ "$(stat_of "$WORK/bridge_b.log" in_published)" -ge 40 ] || status=1
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
