#!/bin/sh
# SPDX-License-Identifier: MIT
# Does the profiler tell the truth?  For each layer of INI (default
# etc/fashion-mnist.ini), its forward and backward time as [partition]
# cost = profile measures it (alone, on the run's own samples, median of
# repeats) against its median time inside real training steps
# (PIPEHOST_LAYER_TIMES, core/layer_times.h: every call from step 3 on),
# and the ratio profile / in-step, on the profiler's clock (the thread's
# CPU time with one BLAS thread, else wall).  The last line sums the layers: the
# profile's total against the steps'.  Target: every layer that matters
# (>= 2% of the step) within 20%, ratio 0.8..1.2.
#     bench/profile-vs-step.sh [BUILD_DIR] [INI] [--set ...]
# Environment: STEPS (default 60).  The run keeps the INI's stages and
# threads; the profile is taken fresh (a cache of its own) with the same
# BLAS threads per rank.  On a busy machine both sides are noisy: run it
# twice.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
ini=${2:-$top/etc/fashion-mnist.ini}
[ $# -ge 2 ] && shift 2 || shift $#
bin="$build/pipehost"
steps=${STEPS:-60}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
# PIPEHOST_LAYER_TIMES times the calls from step 3 on
need_count profile-vs-step.sh STEPS "$steps" 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "profile-vs-step.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
PIPEHOST_LAYER_TIMES=$tmp/step.txt "$bin" -c "$ini" --set partition.cost=profile \
	--set partition.profile_cache="$tmp/cache" --set run.steps="$steps" --set run.eval=no \
	--progress=none "$@" >"$tmp/out.txt" || { cat "$tmp/out.txt" >&2; exit 1; }
grep '^cpu:\|^plan:\|^profile: measuring' "$tmp/out.txt"
# The profile times a layer by the thread's CPU clock when it runs on one
# BLAS thread (else wall): compare with the same clock inside the steps.
cpu=0
grep -q '^profile: measuring.*(CPU time' "$tmp/out.txt" && cpu=1
echo "clock: $([ $cpu = 1 ] && echo "thread CPU time (1 BLAS thread)" || echo wall)"
# profile file: "layer I TYPE FWD_S BWD_S NAME"
# step file: "layer I NAME TYPE FWD_MS BWD_MS CALLS FWD_CPU_MS BWD_CPU_MS"
awk -v cpu=$cpu 'FNR == 1 { f++ }
     f == 1 && $1 == "layer" { pf[$2] = 1000 * $4; pb[$2] = 1000 * $5 }
     f == 2 && $1 == "layer" { n = $2 + 1; name[$2] = $3; type[$2] = $4
				sf[$2] = cpu ? $8 : $5; sb[$2] = cpu ? $9 : $6; wf += $5; wb += $6 }
     function r(a, b) { return b > 0 ? sprintf("%6.2f", a / b) : "     -" }
     END {
	for (i = 0; i < n; i++) tot += sf[i] + sb[i]
	printf "%-5s %-12s %-12s %9s %9s %6s %9s %9s %6s %6s\n", "layer", "name", "type",
		"prof fwd", "step fwd", "ratio", "prof bwd", "step bwd", "ratio", "share"
	for (i = 0; i < n; i++) {
		printf "%-5d %-12s %-12s %9.3f %9.3f %s %9.3f %9.3f %s %5.1f%%\n", i, name[i], type[i],
			pf[i], sf[i], r(pf[i], sf[i]), pb[i], sb[i], r(pb[i], sb[i]), 100 * (sf[i] + sb[i]) / tot
		PF += pf[i]; SF += sf[i]; PB += pb[i]; SB += sb[i]
		if ((sf[i] + sb[i]) / tot >= 0.02) {
			q = (pf[i] + pb[i]) / (sf[i] + sb[i]); big++
			if (q >= 0.8 && q <= 1.2) ok++
		}
	}
	printf "%-5s %-12s %-12s %9.3f %9.3f %s %9.3f %9.3f %s\n", "", "total", "", PF, SF, r(PF, SF), PB, SB, r(PB, SB)
	printf "layers with >= 2%% of the step whose fwd+bwd ratio is within 0.8..1.2: %d of %d\n", ok, big
	if (cpu) printf "in-step wall time of the same calls: fwd %.3f ms, bwd %.3f ms (wall / CPU %.2f)\n", wf, wb, (wf + wb) / (SF + SB)
     }' "$tmp"/cache/profile-*.txt "$tmp/step.txt"
