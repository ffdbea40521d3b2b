#!/usr/bin/env bash
# No loops, no duplicates, with two bridges on one host, both directions, counted at every hop.
#  1. Two bridges serving the SAME ferry domain: only one sends the topic out (the DDS subscriber
#     sees each frame once), neither brings the other's frames back in (the local subscriber
#     sees the camera's publisher only).
#  2. Two bridges serving DIFFERENT ferry directories (two "hosts" sharing DDS): frames go
#     A -> DDS -> B, and B's inbound copies never go back out (B writes nothing, A takes nothing
#     in); the DDS subscriber sees each frame exactly once.
#  3. As 2, with a camera on the same topic on both "hosts": each bridge sends its own camera
#     out and skips the copies of the other's that it brought in (out_skipped), so neither
#     writes more frames than its camera published.
# The cameras admit blocking subscribers, so the bridges' routes are lossless and the counts
# exact whatever the load: every far end gets every frame from its first one (discovery decides
# which that is) to the camera's last, once; a subscriber's own queue drops are allowed for and
# counted. Nothing waits on a fixed timeout: the far ends run until the last frame came.
source "$(dirname "$0")/lib.sh"
[ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sub" ] || skip "plain DDS programs not built"

FRAMES=150
MIN_RUN=20
DRAIN_S=30
status=0

new_ns NS1 L1
new_ns NS2 L2
new_ns NS3 L3
S=$WORK/same
A=$WORK/a
B=$WORK/b

# Scenario 1 in NS1.
bg "$NS1" "$WORK/x.log" "$FERRY" bridge --dir "$S" --stats
X=$LAST_PID
sleep 0.2
bg "$NS1" "$WORK/y.log" "$FERRY" bridge --dir "$S" --stats
Y=$LAST_PID
bg "$NS1" "$WORK/s1.log" "$PLAIN/bridge_plain_sub" --keep-all 30 rt/cam 320 240 rgb8 cam -1 600
P1=$LAST_PID
bg "$NS1" "$WORK/e1.log" "$FERRY" echo /cam --dir "$S" --type sensor_msgs/Image --verify --depth 16
E1=$LAST_PID

# Scenario 2 in NS2.
bg "$NS2" "$WORK/b1.log" "$FERRY" bridge --dir "$A" --stats
B1=$LAST_PID
bg "$NS2" "$WORK/b2.log" "$FERRY" bridge --dir "$B" --stats
B2=$LAST_PID
bg "$NS2" "$WORK/s2.log" "$PLAIN/bridge_plain_sub" --keep-all 30 rt/cam 320 240 rgb8 cam -1 600
P2=$LAST_PID
bg "$NS2" "$WORK/e2a.log" "$FERRY" echo /cam --dir "$A" --type sensor_msgs/Image --verify --depth 16
E2A=$LAST_PID
bg "$NS2" "$WORK/e2b.log" "$FERRY" echo /cam --dir "$B" --type sensor_msgs/Image --verify --depth 16
E2B=$LAST_PID

# Scenario 3 in NS3.
bg "$NS3" "$WORK/c1.log" "$FERRY" bridge --dir "$WORK/c" --stats
C1=$LAST_PID
bg "$NS3" "$WORK/c2.log" "$FERRY" bridge --dir "$WORK/d" --stats
C2=$LAST_PID

sleep 0.5
bg "$NS3" "$WORK/pub3c.log" "$FERRY" pub /cam --dir "$WORK/c" --image 320x240 --rate 30 --count $FRAMES --admit-blocking
Q3=$LAST_PID
bg "$NS3" "$WORK/pub3d.log" "$FERRY" pub /cam --dir "$WORK/d" --image 320x240 --rate 30 --count $FRAMES --admit-blocking
Q4=$LAST_PID
bg "$NS1" "$WORK/pub1.log" "$FERRY" pub /cam --dir "$S" --image 320x240 --frame-id cam --rate 30 --count $FRAMES --admit-blocking
Q1=$LAST_PID
bg "$NS2" "$WORK/pub2.log" "$FERRY" pub /cam --dir "$A" --image 320x240 --frame-id cam --rate 30 --count $FRAMES --admit-blocking
Q2=$LAST_PID

wait "$Q1" "$Q2" "$Q3" "$Q4"
echo "-- cameras done after $(elapsed) s"
N1=$(pub_field "$WORK/pub1.log" published)
N2=$(pub_field "$WORK/pub2.log" published)
wait_frame "$WORK/s1.log" "$N1" $DRAIN_S seq || echo "note: scenario 1: frame $N1 not at the DDS subscriber after $DRAIN_S s"
wait_frame "$WORK/e1.log" "$N1" $DRAIN_S || echo "note: scenario 1: frame $N1 not at the local subscriber after $DRAIN_S s"
wait_frame "$WORK/s2.log" "$N2" $DRAIN_S seq || echo "note: scenario 2: frame $N2 not at the DDS subscriber after $DRAIN_S s"
wait_frame "$WORK/e2a.log" "$N2" $DRAIN_S || echo "note: scenario 2: frame $N2 not at host A's subscriber after $DRAIN_S s"
wait_frame "$WORK/e2b.log" "$N2" $DRAIN_S || echo "note: scenario 2: frame $N2 not at host B's subscriber after $DRAIN_S s"
echo "-- far ends drained after $(elapsed) s"
kill -TERM "$P1" "$P2" "$E1" "$E2A" "$E2B"
wait "$P1" "$P2" "$E1" "$E2A" "$E2B"
kill -TERM "$X" "$Y" "$B1" "$B2" "$C1" "$C2"
wait "$X" "$Y" "$B1" "$B2" "$C1" "$C2"
for f in x y b1 b2 c1 c2; do grep -v '^seq=' "$WORK/$f.log" | sed "s/^/[$f] /"; done
for f in s1 s2 e1 e2a e2b pub1 pub2 pub3c pub3d; do grep -v '^seq=' "$WORK/$f.log" | sed "s/^/[$f] /"; done

publishers() { sed -n 's/.*publisher=\([0-9a-f]*\).*/\1/p' "$1" | sort -u | wc -l; }

echo "== scenario 1: two bridges, one ferry domain"
check_run "DDS subscriber" "$WORK/s1.log" "$N1" $MIN_RUN seq
check_run "local subscriber" "$WORK/e1.log" "$N1" $MIN_RUN frame "$(echo_field "$WORK/e1.log" dropped)"
check "local subscriber: publishers seen (the camera only)" "$(publishers "$WORK/e1.log")" 1
wx=$(stat_of "$WORK/x.log" out_written)
wy=$(stat_of "$WORK/y.log" out_written)
check "bridges writing to DDS (X wrote $wx, Y wrote $wy)" "$(( (wx > 0) + (wy > 0) ))" 1
check "bridge X in_published" "$(stat_of "$WORK/x.log" in_published)" 0
check "bridge Y in_published" "$(stat_of "$WORK/y.log" in_published)" 0

echo "== scenario 2: two bridges, two ferry directories"
check_run "DDS subscriber" "$WORK/s2.log" "$N2" $MIN_RUN seq
check_run "host A subscriber" "$WORK/e2a.log" "$N2" $MIN_RUN frame "$(echo_field "$WORK/e2a.log" dropped)"
check "host A subscriber: publishers seen (the camera only)" "$(publishers "$WORK/e2a.log")" 1
check "bridge A in_published (nothing comes back)" "$(stat_of "$WORK/b1.log" in_published)" 0
check "bridge B out_written (nothing goes back)" "$(stat_of "$WORK/b2.log" out_written)" 0
wa=$(stat_of "$WORK/b1.log" out_written)
check_le "bridge B in_published" "$(stat_of "$WORK/b2.log" in_published)" "$wa" "bridge A wrote $wa"
check_run "host B subscriber" "$WORK/e2b.log" "$N2" $MIN_RUN frame "$(echo_field "$WORK/e2b.log" dropped)"

echo "== scenario 3: a camera on each side, same topic"
for f in c1 c2; do
    cam=$([ $f = c1 ] && echo pub3c || echo pub3d)
    w=$(stat_of "$WORK/$f.log" out_written)
    k=$(stat_of "$WORK/$f.log" out_skipped)
    p=$(stat_of "$WORK/$f.log" in_published)
    check_le "bridge $f out_written (its own camera's frames only)" "$w" "$(pub_field "$WORK/$cam.log" published)" \
        "its camera published that many"
    check_ge "bridge $f out_written" "$w" $MIN_RUN
    check_le "bridge $f out_skipped (the other camera's frames it brought in)" "$k" "$p" "it brought in $p"
    check_ge "bridge $f out_skipped" "$k" $MIN_RUN
done
for f in "$WORK"/e*.log; do
    check "$(basename "$f" .log): corrupt frames" "$(echo_field "$f" corrupt)" 0
done
for f in x y b1 b2 c1 c2; do
    check "$f: frames lost by the bridge" "$(sed -n 's/^ferry bridge: losses: //p' "$WORK/$f.log")" none
done
echo "-- $(elapsed) s in all"
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
