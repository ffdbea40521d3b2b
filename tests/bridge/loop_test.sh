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
# The first SETTLE frames are left out of exact counts: discovery is still going on then.
source "$(dirname "$0")/lib.sh"
[ "$PLAIN" != none ] && [ -x "$PLAIN/bridge_plain_sub" ] || skip "plain DDS programs not built"

FRAMES=150
SETTLE=45
EXPECT=$((FRAMES - SETTLE))
status=0
check() { # check DESCRIPTION ACTUAL EXPECTED
    if [ "$2" = "$3" ]; then echo "ok: $1 = $2"; else echo "MISMATCH: $1 = $2, expected $3"; status=1; fi
}
# check_count DESCRIPTION ACTUAL EXPECTED: frames counted at a hop. Exact, except that a
# sanitizer build may lose frames (see loss in lib.sh); more than expected is a duplicate anyway.
check_count() {
    if [ "$2" != "$3" ] && [ "$2" -gt 0 ] && [ "$2" -lt "$3" ]; then
        loss "$1 = $2, expected $3"
    else
        check "$@"
    fi
}

new_ns NS1 L1
new_ns NS2 L2
new_ns NS3 L3
S=$WORK/same
A=$WORK/a
B=$WORK/b

# Scenario 1 in NS1.
bg "$NS1" "$WORK/x.log" "$FERRY" bridge --dir "$S" --stats --seconds 30
X=$LAST_PID
sleep 0.2
bg "$NS1" "$WORK/y.log" "$FERRY" bridge --dir "$S" --stats --seconds 30
Y=$LAST_PID
bg "$NS1" "$WORK/s1.log" "$PLAIN/bridge_plain_sub" rt/cam 320 240 rgb8 cam -1 9
P1=$LAST_PID
bg "$NS1" "$WORK/e1.log" "$FERRY" echo /cam --dir "$S" --type sensor_msgs/Image --verify --timeout 9
E1=$LAST_PID

# Scenario 2 in NS2.
bg "$NS2" "$WORK/b1.log" "$FERRY" bridge --dir "$A" --stats --seconds 30
B1=$LAST_PID
bg "$NS2" "$WORK/b2.log" "$FERRY" bridge --dir "$B" --stats --seconds 30
B2=$LAST_PID
bg "$NS2" "$WORK/s2.log" "$PLAIN/bridge_plain_sub" rt/cam 320 240 rgb8 cam -1 9
P2=$LAST_PID
bg "$NS2" "$WORK/e2a.log" "$FERRY" echo /cam --dir "$A" --type sensor_msgs/Image --verify --timeout 9
E2A=$LAST_PID
bg "$NS2" "$WORK/e2b.log" "$FERRY" echo /cam --dir "$B" --type sensor_msgs/Image --verify --timeout 9
E2B=$LAST_PID

# Scenario 3 in NS3.
bg "$NS3" "$WORK/c1.log" "$FERRY" bridge --dir "$WORK/c" --stats --seconds 30
C1=$LAST_PID
bg "$NS3" "$WORK/c2.log" "$FERRY" bridge --dir "$WORK/d" --stats --seconds 30
C2=$LAST_PID

sleep 0.5
bg "$NS3" "$WORK/pub3c.log" "$FERRY" pub /cam --dir "$WORK/c" --image 320x240 --rate 30 --count $FRAMES
Q3=$LAST_PID
bg "$NS3" "$WORK/pub3d.log" "$FERRY" pub /cam --dir "$WORK/d" --image 320x240 --rate 30 --count $FRAMES
Q4=$LAST_PID
bg "$NS1" "$WORK/pub1.log" "$FERRY" pub /cam --dir "$S" --image 320x240 --frame-id cam --rate 30 --count $FRAMES
Q1=$LAST_PID
bg "$NS2" "$WORK/pub2.log" "$FERRY" pub /cam --dir "$A" --image 320x240 --frame-id cam --rate 30 --count $FRAMES
Q2=$LAST_PID

wait "$P1" "$P2" "$E1" "$E2A" "$E2B" "$Q1" "$Q2" "$Q3" "$Q4"
kill -TERM "$X" "$Y" "$B1" "$B2" "$C1" "$C2"
wait "$X" "$Y" "$B1" "$B2" "$C1" "$C2"
for f in x y b1 b2 c1 c2; do grep -v '^seq=' "$WORK/$f.log" | sed "s/^/[$f] /"; done
for f in s1 s2 e1 e2a e2b; do grep -v '^seq=' "$WORK/$f.log" | sed "s/^/[$f] /"; done

publishers() { sed -n 's/.*publisher=\([0-9a-f]*\).*/\1/p' "$1" | sort -u | wc -l; }

echo "== scenario 1: two bridges, one ferry domain"
read -r n d < <(seqs_over "$WORK/s1.log" $SETTLE)
check_count "DDS subscriber: frames after settling" "$n" $EXPECT
check "DDS subscriber: duplicates" "$d" 0
read -r n d < <(seqs_over "$WORK/e1.log" $SETTLE)
check_count "local subscriber: frames after settling" "$n" $EXPECT
check "local subscriber: duplicates" "$d" 0
check "local subscriber: publishers seen" "$(publishers "$WORK/e1.log")" 1
wx=$(stat_of "$WORK/x.log" out_written)
wy=$(stat_of "$WORK/y.log" out_written)
check "bridges writing to DDS" "$(( (wx > 0) + (wy > 0) ))" 1
check "DDS subscriber: duplicates, from the start" "$(seqs_over "$WORK/s1.log" 0 | cut -d' ' -f2)" 0
check "bridge X in_published" "$(stat_of "$WORK/x.log" in_published)" 0
check "bridge Y in_published" "$(stat_of "$WORK/y.log" in_published)" 0

echo "== scenario 2: two bridges, two ferry directories"
read -r n d < <(seqs_over "$WORK/s2.log" $SETTLE)
check_count "DDS subscriber: frames after settling" "$n" $EXPECT
check "DDS subscriber: duplicates" "$d" 0
read -r n d < <(seqs_over "$WORK/e2a.log" $SETTLE)
check_count "host A subscriber: frames after settling" "$n" $EXPECT
check "host A subscriber: duplicates" "$d" 0
check "host A subscriber: publishers seen" "$(publishers "$WORK/e2a.log")" 1
check "bridge A in_published (nothing comes back)" "$(stat_of "$WORK/b1.log" in_published)" 0
check "bridge B out_written (nothing goes back)" "$(stat_of "$WORK/b2.log" out_written)" 0
wa=$(stat_of "$WORK/b1.log" out_written)
pb=$(stat_of "$WORK/b2.log" in_published)
[ "$pb" -ge $EXPECT ] && [ "$pb" -le "$wa" ] && echo "ok: bridge B published $pb of the $wa bridge A wrote" ||
    { echo "MISMATCH: bridge B published $pb, bridge A wrote $wa"; status=1; }
got=$(grep -c '^seq=.* ok$' "$WORK/e2b.log")
[ "$got" -ge $EXPECT ] && [ "$got" -le "$pb" ] && echo "ok: host B subscriber got $got of $pb" ||
    { echo "MISMATCH: host B subscriber got $got, bridge B published $pb"; status=1; }
echo "== scenario 3: a camera on each side, same topic"
for f in c1 c2; do
    w=$(stat_of "$WORK/$f.log" out_written)
    k=$(stat_of "$WORK/$f.log" out_skipped)
    p=$(stat_of "$WORK/$f.log" in_published)
    [ "$w" -le $FRAMES ] && [ "$w" -ge $EXPECT ] && echo "ok: bridge $f wrote $w (its camera's only)" ||
        { echo "MISMATCH: bridge $f wrote $w, its camera published $FRAMES"; status=1; }
    [ "$k" -ge $EXPECT ] && [ "$k" -le "$p" ] && echo "ok: bridge $f skipped $k of the $p it brought in" ||
        { echo "MISMATCH: bridge $f skipped $k, brought in $p"; status=1; }
done
grep -q CORRUPT "$WORK"/e*.log && { echo "corrupt frames"; status=1; }
[ "$status" = 0 ] && echo "PASS" || echo "FAIL"
exit $status
