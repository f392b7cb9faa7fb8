#!/usr/bin/env bash
# Starts N copies of a command as the ranks of one job, the way torchrun
# does: each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT set (one host; rank r on GPU r). Waits for all;
# when one fails, the others get TIMEOUT seconds to end by themselves (their
# collectives' watchdogs should make them), then are killed.
#   scripts/launch_ranks.sh N [--timeout SECONDS] [--port P] -- COMMAND [ARGS...]
#   scripts/launch_ranks.sh 8 -- build/tools/fp8c verify examples/gpt_mlp.fp8 --device gpu --nccl
# Each rank's output goes to ${LOG_DIR:-.}/rank<r>.log and is echoed with a
# "[r] " prefix at the end. Exit status: 0 when every rank exits 0, else the
# first failing rank's status (124 when ranks had to be killed).
set -uo pipefail
n=${1:?usage: launch_ranks.sh N [--timeout S] [--port P] -- COMMAND...}
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "launch_ranks: N must be a positive integer, not '$n'" >&2; exit 2; }
shift
timeout=60
port=$((29500 + RANDOM % 1000))
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --timeout) timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --port) port=${2:?--port needs a port}; shift 2 ;;
    *) echo "launch_ranks: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "launch_ranks: no command" >&2; exit 2; }
logs=${LOG_DIR:-.}
mkdir -p "$logs"

# Each rank in a process group of its own (setsid), so that stopping it
# stops whatever it started too; Ctrl-C or a TERM to the launcher stops all.
pids=()
stop_all() {
  local signal=$1
  for pid in "${pids[@]}"; do kill "-$signal" -- "-$pid" 2>/dev/null; done
}
trap 'stop_all TERM; sleep 2; stop_all KILL; exit 130' INT TERM
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port setsid "$@" > "$logs/rank$r.log" 2>&1 &
  pids+=($!)
done

status=0
failed_at=0
remaining=$n
declare -A done_rank
while [ $remaining -gt 0 ]; do
  for ((r = 0; r < n; r++)); do
    [ -n "${done_rank[$r]:-}" ] && continue
    if ! kill -0 "${pids[$r]}" 2>/dev/null; then
      wait "${pids[$r]}"
      rc=$?
      done_rank[$r]=$rc
      remaining=$((remaining - 1))
      if [ $rc -ne 0 ] && [ $status -eq 0 ]; then
        status=$rc
        failed_at=$SECONDS
        echo "launch_ranks: rank $r exited with $rc; the others have ${timeout}s to end" >&2
      fi
    fi
  done
  if [ $status -ne 0 ] && [ $((SECONDS - failed_at)) -gt "$timeout" ]; then
    for ((r = 0; r < n; r++)); do
      if [ -z "${done_rank[$r]:-}" ]; then
        echo "launch_ranks: rank $r still running ${timeout}s after the failure: stopped" >&2
        kill -TERM -- "-${pids[$r]}" 2>/dev/null
        sleep 2
        kill -KILL -- "-${pids[$r]}" 2>/dev/null
        wait "${pids[$r]}" 2>/dev/null
        done_rank[$r]=137
        remaining=$((remaining - 1))
        status=124
      fi
    done
  fi
  sleep 0.2
done
for ((r = 0; r < n; r++)); do sed "s/^/[$r] /" "$logs/rank$r.log"; done
exit $status
