#!/usr/bin/env bash
# envoy-vs.sh measures `limitd serve`'s gRPC front end (Envoy's rate limit
# service) against the Envoy reference rate limit server
# (github.com/envoyproxy/ratelimit), both over one private redis-server with
# the same rule under different key prefixes, driven from one program
# (scripts/_envoyvs, test code built with go test -c) at 1, 16 and 64 calls
# in flight, on one counter and over 10,000, in rounds in which the side going first alternates. It
# prints, as Markdown, each side's calls/s and redis-server CPU per call and
# their ratios (medians), the Redis commands each issues per call, each
# server's own CPU per call, and the driver's and the machine's (driver,
# server and Redis) per call; it fails if a call was refused, answered wrong
# or not counted in Redis.
#
# The reference is built here from its source, which the Go module proxy
# serves, outside this module (go install pkg@version), and cached by
# version under ${XDG_CACHE_HOME:-~/.cache}/limitd-envoy-vs; nothing of it
# enters the repository. The program is not a benchmark of integration/
# because it needs that build, which CI cannot count on, and because each
# side's round is measured from outside (INFO before and after) rather than
# per operation; it lives in a folder the go tool skips and is built here,
# in this module. TestEnvoyVsProgram vets it; with LIMITD_ENVOY_VS=1,
# TestEnvoyVsScript runs this script with QUICK=1.
#
#   scripts/envoy-vs.sh                     # 7 rounds of 1.5 s per side per row
#   ROUNDS=9 ROUND=2s scripts/envoy-vs.sh
#   CALLERS=16 scripts/envoy-vs.sh          # only the rows of 16 callers (1, 16, 64, comma-separated)
#   QUICK=1 scripts/envoy-vs.sh             # 1 round of 300 ms per row, to check the script
#   REF_VERSION=v1.4.0 scripts/envoy-vs.sh  # another version of the reference (default latest)
#   REF_ENV='REDIS_PIPELINE_WINDOW=150us' scripts/envoy-vs.sh  # the reference with more settings
#   LIMITD_ENV='GOGC=200' scripts/envoy-vs.sh                  # limitd with more settings
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-7}
round=${ROUND:-1500ms}
if [ "${QUICK:-}" = 1 ]; then rounds=1; round=300ms; fi
command -v redis-server >/dev/null || { echo "envoy-vs: redis-server not installed (apt-get install -y redis-server)" >&2; exit 1; }
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The reference, at the version the module proxy resolves, built once per
# version. Outside this module, with none of its settings.
ref_module=github.com/envoyproxy/ratelimit
refv=$(cd "$tmp" && GOFLAGS= GOWORK=off go list -m -f '{{.Version}}' "$ref_module@${REF_VERSION:-latest}") ||
  { echo "envoy-vs: cannot resolve $ref_module@${REF_VERSION:-latest} (it comes from the Go module proxy)" >&2; exit 1; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/limitd-envoy-vs/$refv
if [ ! -x "$cache/service_cmd" ]; then
  echo "envoy-vs: building $ref_module@$refv into $cache" >&2
  mkdir -p "$cache"
  (cd "$tmp" && GOFLAGS= GOWORK=off GOBIN="$cache" go install "$ref_module/src/service_cmd@$refv") ||
    { echo "envoy-vs: could not build $ref_module@$refv" >&2; exit 1; }
fi

go build -o "$tmp/limitd" ./cmd/limitd
go test -c -o "$tmp/envoyvs" ./scripts/_envoyvs
rev="$(git -C "$root" log -1 --format=%h 2>/dev/null || echo '?')$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes')"
"$tmp/envoyvs" -limitd "$tmp/limitd" -ref "$cache/service_cmd" -limitd-version "$rev" -ref-version "$refv" \
  -rounds "$rounds" -round "$round" -ref-env "${REF_ENV:-}" -callers "${CALLERS:-}" -limitd-env "${LIMITD_ENV:-}"
