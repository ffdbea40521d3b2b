#!/usr/bin/env bash
# The bridge keeps going through crashes around it and of itself, and no chunk leaks:
# SIGKILL of a local subscriber, of the local publisher, of the DDS peer (the other bridge), of
# the bridge itself; after each, frames flow again (checksums verified), and at the end the
# publishers on both sides have no chunk in use and the bridges exit cleanly. When the writing
# peer (bridge A) is killed, bridge B's in route (its ferry publisher) must be gone within
# ROUTE_GONE_S: the 3 s lease of the bridge's participant, a scan and the 1 s grace, with
# generous slack for a loaded machine (measured: about 5 s idle, 8 to 10 s with both CPUs of
# two busy). The camera admits blocking subscribers, so bridge A's subscriber is a blocking one:
# its crash, and a stalled DDS peer, must not keep the camera blocked.
source "$(dirname "$0")/lib.sh"

new_ns NS F
A=$WORK/a
B=$WORK/b
status=0
ROUTE_GONE_S=15
flows() { # flows LABEL: 20 verified frames reach host B's subscriber
    bg "$NS" "$WORK/echo_$1.log" "$FERRY" echo /cam --dir "$B" --type sensor_msgs/Image --verify --count 20 --timeout 15
    if wait "$LAST_PID"; then echo "ok: frames flow $1"; else echo "FAIL: frames do not flow $1: ferry echo wanted 20 verified frames within 15 s and exited with status $?; its last lines:"; tail -n 3 "$WORK/echo_$1.log"; status=1; fi
}
start_a() { bg "$NS" "$WORK/bridge_a$1.log" "$FERRY" bridge --dir "$A" --direction out --stats --quiet; BA=$LAST_PID; }
start_b() { bg "$NS" "$WORK/bridge_b$1.log" "$FERRY" bridge --dir "$B" --direction in --stats --quiet; BB=$LAST_PID; }
start_pub() { bg "$NS" "$WORK/pub$1.log" "$FERRY" pub /cam --dir "$A" --image 320x240 --rate 30 --count 100000 --admit-blocking; PA=$LAST_PID; }

start_a 1
start_b 1
start_pub 1
flows "at the start"

bg "$NS" "$WORK/echo_victim.log" "$FERRY" echo /cam --dir "$B" --type sensor_msgs/Image --quiet
sleep 1
kill -KILL "$LAST_PID"; wait "$LAST_PID" 2>/dev/null
flows "after a local subscriber was killed"

kill -KILL "$PA"; wait "$PA" 2>/dev/null
start_pub 2
flows "after the local publisher was killed and restarted"

kill -KILL "$BB"; wait "$BB" 2>/dev/null
start_b 2
flows "after the DDS peer (bridge B) was killed and restarted"

kill -KILL "$BA"; wait "$BA" 2>/dev/null
t0=$(date +%s%3N)
gone=
while [ $(($(date +%s%3N) - t0)) -lt $(((ROUTE_GONE_S + 3) * 1000)) ]; do
    n=$(info_field "$B" /cam "sum(1 for p in j['publishers'] if p['alive'])" 2>/dev/null)
    if [ "${n:-0}" = 0 ]; then gone=$(($(date +%s%3N) - t0)); break; fi
    sleep 0.2
done
if [ -n "$gone" ] && [ "$gone" -le $((ROUTE_GONE_S * 1000)) ]; then
    echo "ok: bridge B's in route went $gone ms after its DDS peer was killed"
else
    echo "FAIL: bridge B's in route stayed ${gone:-more than $(((ROUTE_GONE_S + 3) * 1000))} ms after its DDS peer was killed"; status=1
fi
start_a 2
flows "after the bridge itself (bridge A) was killed and restarted"

# No chunk leaks. Host B: bridge B's publisher, now that its subscribers left (checked while
# bridge A still writes: once it stops, bridge B's route closes a second later).
sleep 0.5
in_use=$(info_field "$B" /cam "[p['chunks_in_use'] for p in j['publishers'] if p['alive']]")
echo "host B bridge publisher: chunks_in_use $in_use"
[ "$in_use" = "[0]" ] || { echo "FAIL: LEAK on host B: bridge B's publisher chunks_in_use expected [0], got ${in_use:-nothing}"; status=1; }
# Host A: with the bridge gone (cleanly), the publisher takes every chunk back.
kill -TERM "$BA"
wait "$BA" || { echo "FAIL: bridge A exited with status $? (expected 0 after SIGTERM)"; status=1; }
sleep 0.5
in_use=$(info_field "$A" /cam "[p['chunks_in_use'] for p in j['publishers'] if p['alive']]")
reclaimed=$(info_field "$A" /cam "sum(p['chunks_reclaimed'] for p in j['publishers'] if p['alive'])")
echo "host A publisher: chunks_in_use $in_use, reclaimed from dead subscribers $reclaimed"
[ "$in_use" = "[0]" ] || { echo "FAIL: LEAK on host A: the camera's chunks_in_use expected [0], got ${in_use:-nothing}"; status=1; }
kill -TERM "$BB" "$PA"
wait "$BB" || { echo "FAIL: bridge B exited with status $? (expected 0 after SIGTERM)"; status=1; }
wait "$PA"
cat "$WORK"/bridge_*.log
for d in "$A" "$B"; do "$FERRY" clean --dir "$d" >/dev/null; done
left=$("$FERRY" topics --dir "$A"; "$FERRY" topics --dir "$B")
[ -z "$left" ] || { echo "FAIL: endpoints left after ferry clean (expected none): $left"; status=1; }
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
