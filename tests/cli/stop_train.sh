#!/usr/bin/env bash
# stop_train.sh FERRY WAIT SIGNALS -- TRAIN_ARGS...: starts `ferry train TRAIN_ARGS`, waits until its output
# matches WAIT (grep -E; "-": no output to wait for, 1 s) and 0.3 s more, sends SIGNALS ("INT", "TERM", "HUP", "INT INT": 0.2 s apart), then
# prints its output and "exited with status N within a second"; a run still alive a second after the
# last signal is killed (status 99). Exits with ferry's status.
set -uo pipefail
ferry=$1 wait_for=$2 signals=$3
shift 4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$ferry" train "$@" > "$log" 2>&1 &
pid=$!
[ "$wait_for" != "-" ] || sleep 0.7
for _ in $(seq 1 6000); do
  [ "$wait_for" != "-" ] || break
  grep -Eq -- "$wait_for" "$log" && break
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.01
done
sleep 0.3
separator=""
for signal in $signals; do
  [ -z "$separator" ] || sleep 0.2
  separator=" "
  kill -s "$signal" "$pid" 2> /dev/null
done
sent=$(date +%s%N)
while kill -0 "$pid" 2> /dev/null && [ $(( $(date +%s%N) - sent )) -lt 1000000000 ]; do sleep 0.01; done
if kill -0 "$pid" 2> /dev/null; then
  kill -9 "$pid"
  wait "$pid" 2> /dev/null
  cat "$log"
  echo "stop_train.sh: still running a second after SIG${signal}; killed"
  exit 99
fi
wait "$pid"
status=$?
cat "$log"
echo "exited with status $status within a second of the last signal"
exit "$status"
