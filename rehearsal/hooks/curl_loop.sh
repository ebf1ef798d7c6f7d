#!/usr/bin/env bash
# The shell preStop loop operators write: curl /metrics, grep the two vLLM
# gauges, compare them to 0.0, sleep, repeat; no deadline of its own (the
# kubelet's grace period is its only bound) and no timeout on curl.
#   curl_loop.sh URL PERIOD
# As written against a single vLLM engine, `grep -m1` keeps the first sample
# of each gauge: with DP engines that is engine="0" only.
url="$1"
period="${2:-5}"
while true; do
  body=$(curl -s "$url")
  running=$(printf '%s\n' "$body" | grep -m1 '^vllm:num_requests_running' | awk '{print $2}')
  waiting=$(printf '%s\n' "$body" | grep -m1 '^vllm:num_requests_waiting' | awk '{print $2}')
  if [ "$running" = "0.0" ] && [ "$waiting" = "0.0" ]; then
    exit 0
  fi
  sleep "$period"
done
