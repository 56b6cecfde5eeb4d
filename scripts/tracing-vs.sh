#!/usr/bin/env bash
# tracing-vs.sh measures what tracing costs when off: BenchmarkRatelimitCall
# (cmd/limitd: limitd ratelimit answering ShouldRateLimit over gRPC on a
# redis-server of its own) built from this tree and from another commit
# (a tree before tracing existed), run side by side in alternating rounds,
# the order swapped each round; then this tree with tracing on, for scale.
# Nothing is written to the repository: the other tree is exported to a
# temporary directory and given the benchmark's file.
#
#   scripts/tracing-vs.sh 4e8596f              # 6 rounds of 3 s per side
#   ROUNDS=10 BENCHTIME=5s scripts/tracing-vs.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/tracing-vs.sh REV (a commit before tracing, to compare with)}
rounds=${ROUNDS:-6}
benchtime=${BENCHTIME:-3s}
command -v redis-server >/dev/null || { echo "tracing-vs: redis-server not installed (apt-get install -y redis-server)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/other"
git archive "$rev" | tar -x -C "$tmp/other"
cp cmd/limitd/tracing_bench_test.go "$tmp/other/cmd/limitd/"
cat >"$tmp/other/cmd/limitd/tracing_stub_test.go" <<'GO'
package main

import "google.golang.org/grpc"

// registerDropCollector: the tree before tracing runs the benchmark off only.
func registerDropCollector(*grpc.Server) {}
GO
go test -c -o "$tmp/this.test" ./cmd/limitd
(cd "$tmp/other" && go test -c -o "$tmp/other.test" ./cmd/limitd)
echo "tracing off: this tree ($(git log -1 --format=%h HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes')) against $rev ($(git log -1 --format=%h "$rev")), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
run() { # name binary [env]
	local name=$1 bin=$2; shift 2
	env "$@" "$bin" -test.run '^$' -test.bench '^BenchmarkRatelimitCall$' -test.benchtime "$benchtime" 2>/dev/null |
		awk -v n="$name" '/^BenchmarkRatelimitCall/ {for (i = 3; i < NF; i++) v[$(i+1)] = $i; printf "%-8s %s ns/op %s B/op %s allocs/op %s failed/op\n", n, v["ns/op"], v["B/op"], v["allocs/op"], v["failed/op"]}
			/^--- FAIL/ {printf "%-8s FAIL\n", n}'
}
for i in $(seq 1 "$rounds"); do
	if (( i % 2 )); then run this "$tmp/this.test"; run before "$tmp/other.test"
	else run before "$tmp/other.test"; run this "$tmp/this.test"; fi
done | tee "$tmp/rounds"
awk '$2 ~ /^[0-9]/ {s[$1]+=$2; n[$1]++; v[$1]=v[$1] " " $2} END {for (k in s) printf "%-8s mean %.0f ns/op over %d rounds:%s\n", k, s[k]/n[k], n[k], v[k]}' "$tmp/rounds" | sort
echo "for scale, this tree with tracing on (every call traced, exported over OTLP/gRPC):"
run on "$tmp/this.test" LIMITD_BENCH_TRACING=on
