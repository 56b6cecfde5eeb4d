#!/usr/bin/env bash
# store-vs.sh compares this tree's store with another build of it (a commit,
# a tag, a branch) in one process: each store on both of two private
# redis-servers, one goroutine and 32 batched, one key and 10,000, the order
# and the servers alternating from round to round (scripts/_storevs, test
# code built with go test -c).
# Besides the speed it reports each side's CPU time per acquire, this
# process's and redis-server's, which a busy machine moves far less.
# Nothing is written to the repository: the
# other tree is exported to a temporary directory under its own module path.
#
#   scripts/store-vs.sh de9c08f            # 20 rounds of 1 s per row
#   ROUNDS=6 ROUND=500ms scripts/store-vs.sh v1.2.0
#   ONLY='10,000 keys' scripts/store-vs.sh 1075c92   # the rows whose label holds it
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/store-vs.sh REV (a commit, tag or branch to compare with)}
rounds=${ROUNDS:-20}
round=${ROUND:-1s}
command -v redis-server >/dev/null || { echo "store-vs: redis-server not installed (apt-get install -y redis-server)" >&2; exit 1; }
git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || { echo "store-vs: $rev is not a commit here" >&2; exit 1; }
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The other tree, under the module path github.com/limitd/other.
mkdir -p "$tmp/other" "$tmp/vs"
git archive "$rev" | tar -x -C "$tmp/other"
sed -i 's#^module github.com/limitd/limitd$#module github.com/limitd/other#' "$tmp/other/go.mod"
grep -rl 'github.com/limitd/limitd' --include='*.go' "$tmp/other" | xargs -r sed -i 's#github.com/limitd/limitd#github.com/limitd/other#g'

# The program, in a module of its own that takes both trees (under this
# module's path, so that it may use its internal packages).
cp scripts/_storevs/storevs_test.go "$tmp/vs/storevs_test.go"
sed -i '/^\/\/go:build ignore$/d' "$tmp/vs/storevs_test.go"
goline=$(grep -m1 '^go ' go.mod)
redisv=$(awk '$1 == "github.com/redis/go-redis/v9" {print $2; exit}' go.mod)
cat >"$tmp/vs/go.mod" <<EOF
module github.com/limitd/limitd/scripts/storevs

$goline

require (
	github.com/limitd/limitd v0.0.0
	github.com/limitd/other v0.0.0
	github.com/redis/go-redis/v9 $redisv
)

replace github.com/limitd/limitd => $root

replace github.com/limitd/other => $tmp/other
EOF
# Both trees' checksums: the build then needs none from the network.
cat go.sum "$tmp/other/go.sum" 2>/dev/null | sort -u >"$tmp/vs/go.sum"
echo "Store against $rev ($(git log -1 --format=%h "$rev")), this tree at $(git log -1 --format=%h HEAD)$(git diff --quiet HEAD || echo ' with uncommitted changes'),"\
  "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)."
(cd "$tmp/vs" && GOFLAGS=-mod=mod go test -c -o "$tmp/storevs" . 2>&1) || { echo "store-vs: could not build against $rev" >&2; exit 1; }
"$tmp/storevs" -rounds "$rounds" -round "$round" -other "$(git log -1 --format=%h "$rev")" -only "${ONLY:-}"
