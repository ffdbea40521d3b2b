#!/usr/bin/env bash
# The recorder's benchmark: CAMS cameras (default 3) of RES RGB8 (default 1280x720) at 30 fps
# (`ferry pub --image`; 3 x 720p about 250 MB/s together, CAMS=4 RES=1920x1080 746 MB/s), each
# watched by `ferry delay` (stamp -> take, p50 and p99), for SECONDS seconds, first without a
# recorder, then with `ferry record` uncompressed, lz4 and zstd. Prints a table and writes CSV:
# frames published, recorded and lost by the recorder, the file's size and write rate, the
# recorder's CPU time, the consumers' delay and its ratio to the run without a recorder, and the
# publishers' publish-call time (p50, p99). The files go to DIR and are deleted after each run.
#
#   bench/record/run.sh FERRY DIR [SECONDS [CSV]]      e.g. build/ferry /var/tmp 60
#   CAMS=4 RES=1920x1080 bench/record/run.sh build/ferry /var/tmp 20
set -uo pipefail
ferry=$1
dir=$2
seconds=${3:-60}
csv=${4:-}
cams=${CAMS:-3}
res=${RES:-1280x720}
# The median of the cameras' values: the middle one of an odd count, the lower middle of an even one.
mid=$(((cams + 1) / 2))
frames=$((seconds * 30))
work=$(mktemp -d /tmp/ferry-record-bench.XXXXXX)
export FERRY_DIR=$work/d
trap 'for p in $(jobs -p); do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; rm -f "$dir"/ferry-record-bench-*.mcap' EXIT

base_p50="" base_p99=""
[ -n "$csv" ] && echo "mode,seconds,cameras,resolution,published,recorded,recorder_dropped,publisher_dropped,file_bytes,write_MBps,recorder_cpu_s,delay_p50_ms,delay_p99_ms,p50_ratio,p99_ratio,pool_exhausted,blocked,publish_p50_us,publish_p99_us" >"$csv"
printf "%-9s %9s %9s %8s %9s %10s %8s %9s %9s %6s %6s %8s %8s\n" mode published recorded rec_lost \
  file_MB write_MB/s cpu_s p50_ms p99_ms p50x p99x pub50_us pub99_us

run() {
  local mode=$1 file="$dir/ferry-record-bench-$1.mcap" rec="" subs=1 t0 t1
  rm -f "$work"/*.out "$work"/*.err
  for c in $(seq 0 $((cams - 1))); do
    "$ferry" delay /cam$c/image --count $frames --timeout $((seconds + 30)) >"$work/delay$c.out" 2>&1 &
  done
  if [ "$mode" != "baseline" ]; then
    subs=2
    # MODE is a compression, with "+nocrc" for --no-crc.
    ${RECORD_WRAP:-} "$ferry" record '/cam*/image' -o "$file" --compression "${mode%+nocrc}" \
      $([ "${mode%+nocrc}" != "$mode" ] && echo --no-crc) ${RECORD_ARGS:-} >"$work/rec.out" \
      2>"$work/rec.err" &
    rec=$!
  fi
  t0=$(date +%s.%N)
  for c in $(seq 0 $((cams - 1))); do
    "$ferry" pub /cam$c/image ${IMAGE_ARGS:---image $res} --rate 30 --count $frames --wait-subscribers $subs \
      >"$work/pub$c.out" 2>&1 &
  done
  # The publishers end after their frames; the consumers after theirs (or their timeout).
  wait $(jobs -p | grep -v "^${rec:-x}$")
  t1=$(date +%s.%N)
  if [ -n "$rec" ]; then
    sleep 0.5
    kill -INT $rec
    wait $rec
  fi
  # publisher_dropped is the publishers' count of samples dropped from full subscriber queues (the
  # recorder's and the consumers' losses seen from the publisher); pool_exhausted and blocked
  # count frames a publisher could not loan or had to wait for: what a recorder must never cause.
  local published=0 pub_lost=0 exhausted=0 blocked=0 recorded=0 rec_lost=0 size=0 cpu=0 p50 p99
  for c in $(seq 0 $((cams - 1))); do
    published=$((published + $(sed -n 's/.*published \([0-9]*\) frames.*/\1/p' "$work/pub$c.out")))
    pub_lost=$((pub_lost + $(sed -n 's/.*), dropped \([0-9]*\),.*/\1/p' "$work/pub$c.out")))
    exhausted=$((exhausted + $(sed -n 's/.*pool exhausted \([0-9]*\),.*/\1/p' "$work/pub$c.out")))
    blocked=$((blocked + $(sed -n 's/.*, blocked \([0-9]*\),.*/\1/p' "$work/pub$c.out")))
  done
  # The publishers' own cost: each publish call's time (median over the cameras of p50, p99).
  local pub50 pub99
  pub50=$(sed -n 's/.*publish call p50 \([0-9.]*\) us.*/\1/p' "$work"/pub*.out | sort -n | sed -n ${mid}p)
  pub99=$(sed -n 's/.*publish call .* p99 \([0-9.]*\) us.*/\1/p' "$work"/pub*.out | sort -n | sed -n ${mid}p)
  # The consumers' delay: the median over the cameras of each one's total p50 and p99.
  p50=$(sed -n 's/^total .* p50 \([0-9.]*\) ms.*/\1/p' "$work"/delay*.out | sort -n | sed -n ${mid}p)
  p99=$(sed -n 's/^total .* p99 \([0-9.]*\) ms.*/\1/p' "$work"/delay*.out | sort -n | sed -n ${mid}p)
  if [ "$mode" = baseline ]; then
    base_p50=$p50
    base_p99=$p99
  else
    recorded=$(sed -n 's/^total .*recorded \([0-9]*\) .*/\1/p' "$work/rec.out" | paste -sd+ | bc)
    rec_lost=$(sed -n 's/^total .*dropped \([0-9]*\) .*/\1/p' "$work/rec.out" | paste -sd+ | bc)
    size=$(stat -c %s "$file")
    cpu=$(sed -n 's/.*, cpu \([0-9.]*\) s$/\1/p' "$work/rec.out")
    rm -f "$file"
    [ -n "${KEEP_LOGS:-}" ] && cp "$work/rec.out" "$KEEP_LOGS/rec-$mode.out"
  fi
  local span write r50 r99
  span=$(echo "$t1 - $t0" | bc -l)
  write=$(echo "$size / 1000000 / $span" | bc -l)
  r50=$(echo "$p50 / $base_p50" | bc -l)
  r99=$(echo "$p99 / $base_p99" | bc -l)
  printf "%-9s %9d %9d %8d %9.0f %10.0f %8.1f %9.3f %9.3f %6.2f %6.2f %8.1f %8.1f\n" "$mode" \
    "$published" "$recorded" "$rec_lost" "$(echo "$size / 1000000" | bc -l)" "$write" "$cpu" "$p50" \
    "$p99" "$r50" "$r99" "${pub50:-0}" "${pub99:-0}"
  [ -n "$csv" ] && printf "%s,%d,%d,%s,%d,%d,%d,%d,%d,%.1f,%.2f,%.3f,%.3f,%.3f,%.3f,%d,%d,%.1f,%.1f\n" "$mode" \
    "$seconds" "$cams" "$res" "$published" "$recorded" "$rec_lost" "$pub_lost" "$size" "$write" "$cpu" \
    "$p50" "$p99" "$r50" "$r99" "$exhausted" "$blocked" "${pub50:-0}" "${pub99:-0}" >>"$csv"
  return 0
}

# MODES="baseline none baseline none ..." repeats runs to see the noise; ratios are to the last
# baseline. RECORD_ARGS adds options to ferry record; KEEP_LOGS=DIR keeps its output there;
# IMAGE_ARGS="--from FILE" publishes an image file instead of the synthetic (incompressible) frames;
# RECORD_WRAP="nice -n 10" runs the recorder under a command.
for mode in ${MODES:-baseline none lz4 zstd}; do run $mode; done
