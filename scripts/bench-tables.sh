#!/usr/bin/env bash
# bench-tables.sh prints the side-by-side tables of docs/performance.md, each
# from a benchmark that runs limitd and the peer in alternating rounds, with
# the machine and its load noted. ROUNDS=n sets the rounds per figure
# (default 20); QUICK=1 runs 3 rounds of each, to check the script.
#
#   scripts/bench-tables.sh | tee /tmp/bench-tables.md
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-20}
[ "${QUICK:-}" = 1 ] && rounds=3
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime | sed 's/.*average[s]*: //'; }
echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, $(go version | cut -d' ' -f3),"\
  "$(redis-server --version | cut -d' ' -f3 | tr -d 'v='), load average before: $(load)."
echo

bench() { # bench PKG REGEX [BENCHTIME]: the benchmark lines of one run (default: alternating rounds)
  go test -run='^$' -bench="$2" -benchtime="${3:-${rounds}x}" "$1" | grep '^Benchmark' | sed 's/-[0-9]* / /'
}
# metric NAME LINE: the value reported for a metric on a benchmark line
metric() { awk -v m="$1" '{for (i = 3; i < NF; i++) if ($(i + 1) == m) print $i}' <<<"$2"; }

echo "**Store acquire against a writing redis_rate** (BenchmarkAcquireVs, $rounds rounds of 250 ms each;"
echo "limitd batched at 32 goroutines; ratio = limitd's throughput / redis_rate's; server time = FCALL/EVALSHA time per decision):"
echo
echo "| goroutines, keys | limitd / redis_rate | goal | limitd ops/s | redis_rate ops/s | server time, limitd / redis_rate |"
echo "|---|---|---|---|---|---|"
bench ./store/ BenchmarkAcquireVs >"$out/store"
while read -r line; do
  name=$(cut -d' ' -f1 <<<"$line" | sed 's|BenchmarkAcquireVs/||')
  goal="≥ 1.0×"
  case $name in g32/hot | g32/10k-keys) goal="≥ 1.5×" ;; g32/*-tpl) goal="≥ 2.0×" ;; esac
  printf '| %s | **%.2f×** | %s | %.0f | %.0f | %.2f× |\n' "$name" "$(metric ratio "$line")" "$goal" \
    "$(metric limitd-ops/s "$line")" "$(metric redis_rate-ops/s "$line")" "$(metric srv-ratio "$line")"
done <"$out/store"
echo

echo "**Client pool against x/time/rate and a writing redis_rate** (BenchmarkPermitVs, $rounds rounds of 100 ms):"
echo
echo "| goroutines | pool Allow | x/time/rate Allow | redis_rate Allow | pool / x/time/rate (goal ≤ 1.0) | pool permits per redis_rate permit (goal ≥ 100) |"
echo "|---|---|---|---|---|---|"
bench ./client/ BenchmarkPermitVs >"$out/client"
while read -r line; do
  name=$(cut -d' ' -f1 <<<"$line" | sed 's|BenchmarkPermitVs/||')
  printf '| %s | %.0f ns | %.0f ns | %.0f ns | **%.2f×** | **%.0f×** |\n' "$name" "$(metric pool-ns/op "$line")" \
    "$(metric xtime-ns/op "$line")" "$(metric redis_rate-ns/op "$line")" "$(metric pool/xtime "$line")" \
    "$(awk '{print 1 / $1}' <<<"$(metric pool/redis_rate "$line")")"
done <"$out/client"
echo

echo "**In-process limiter against x/time/rate and uber ratelimit** (BenchmarkAllowVs, BenchmarkTakeVs, $rounds rounds of 100 ms):"
echo
echo "| call | limitd | peer | limitd / peer (goal ≤ 1.0) |"
echo "|---|---|---|---|"
bench ./limiter/ 'BenchmarkAllowVs|BenchmarkTakeVs' >"$out/limiter"
while read -r line; do
  name=$(cut -d' ' -f1 <<<"$line" | sed 's|Benchmark||')
  if [ -n "$(metric uber-ns/op "$line")" ]; then
    printf '| %s (Wait vs Take) | %.0f ns | uber %.0f ns | **%.2f×** |\n' "$name" "$(metric limitd-ns/op "$line")" \
      "$(metric uber-ns/op "$line")" "$(metric limitd/uber "$line")"
  else
    printf '| %s | %.0f ns | x/time/rate %.0f ns | **%.2f×** |\n' "$name" "$(metric limitd-ns/op "$line")" \
      "$(metric xtime-ns/op "$line")" "$(metric limitd/xtime "$line")"
  fi
done <"$out/limiter"
echo

httptime=3s
[ "${QUICK:-}" = 1 ] && httptime=300ms
echo "**HTTP acquire through \`limitd serve\`** (BenchmarkHTTPAcquire: the binary over a private redis-server,"
echo "$httptime per row, the load generator on the same cores; 10k-keys = round-robin over 10,000 template instances;"
echo "CPU per request from /proc for limitd and INFO cpu for Redis):"
echo
echo "| connections, keys | requests/s | limitd CPU per request | goal | Redis CPU per request |"
echo "|---|---|---|---|---|"
bench ./integration/ 'BenchmarkHTTPAcquire$' "$httptime" >"$out/http"
while read -r line; do
  name=$(cut -d' ' -f1 <<<"$line" | sed 's|BenchmarkHTTPAcquire/||')
  printf '| %s | %.0f | **%.1f µs** | ≤ 16 µs | %.1f µs |\n' "$name" "$(metric req/s "$line")" \
    "$(metric serve-cpu-us/req "$line")" "$(metric redis-cpu-us/req "$line")"
done <"$out/http"
echo

grpcrounds=$(( rounds < 10 ? rounds : 10 ))
echo "**gRPC (Envoy's rate limit service) against HTTP acquire through \`limitd serve\`** (BenchmarkGRPCvsHTTP:"
echo "the binary over a private redis-server, $grpcrounds alternating rounds of 200 ms; one template instance (hot) or"
echo "round-robin over 10,000; gRPC calls share one HTTP/2 connection, HTTP acquires have a connection each):"
echo
echo "| concurrent calls, keys | gRPC decisions/s | HTTP decisions/s | gRPC / HTTP (decisions/s) |"
echo "|---|---|---|---|"
bench ./integration/ BenchmarkGRPCvsHTTP "${grpcrounds}x" >"$out/grpc"
while read -r line; do
  name=$(cut -d' ' -f1 <<<"$line" | sed 's|BenchmarkGRPCvsHTTP/||')
  printf '| %s | %.0f | %.0f | **%.2f×** |\n' "$name" "$(awk '{print 1e9 / $1}' <<<"$(metric grpc-ns/op "$line")")" \
    "$(awk '{print 1e9 / $1}' <<<"$(metric http-ns/op "$line")")" "$(awk '{print 1 / $1}' <<<"$(metric grpc/http "$line")")"
done <"$out/grpc"
echo

if command -v valgrind >/dev/null 2>&1; then
  echo "**Redis work per decision** (TestInstructionsPerDecision: redis-server's instructions under callgrind,"
  echo "which load does not move):"
  echo
  echo '```'
  LIMITD_CALLGRIND=1 go test -count=1 -run TestInstructionsPerDecision -v ./store/ | grep 'instructions per decision' | sed 's/^ *//'
  echo '```'
  echo
fi
echo "Load average after: $(load)."
