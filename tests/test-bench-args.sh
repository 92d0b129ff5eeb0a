#!/bin/sh
# SPDX-License-Identifier: MIT
# The benchmarks' environment (bench/args-lib.sh): a value a script cannot
# use stops it before anything runs, with one line on stderr that names the
# variable and its value, nothing on stdout (no table header left half
# written), and exit 1; the defaults pass the same checks.  Runs no
# benchmark: a stand-in pipehost fails at once, a stand-in nvidia-smi lists
# no GPU, and PYTHON=false has no torch.
. "$top_srcdir/tests/lib.sh"

bench="$top_srcdir/bench"
mkdir -p "$tmp/bin" "$tmp/build"
printf '#!/bin/sh\necho "stand-in pipehost" >&2\nexit 3\n' >"$tmp/build/pipehost"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/build/pipehost" "$tmp/bin/nvidia-smi"

# run SCRIPT [NAME=VALUE ...]: the script on the stand-ins, out/err/rc in $tmp
run() {
	s=$1
	shift
	env PATH="$tmp/bin:$PATH" PYTHON=false NCU=/nonexistent "$@" timeout 60 sh "$bench/$s" "$tmp/build" \
		>"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
}

# refused SCRIPT NAME=VALUE: exit 1, stdout empty, one stderr line naming it
refused() {
	run "$1" "$2"
	name=${2%%=*}
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" -eq 1 ] && [ ! -s "$tmp/out" ] && [ "$lines" -eq 1 ] &&
		grep -Fq -- "$1: $2 " "$tmp/err" && grep -Fq "unset $name for the default" "$tmp/err"; then
		ok "$1 $2: $(cat "$tmp/err")"
	else
		not_ok "$1 $2: exit $rc, $lines stderr line(s): $(head -c 400 "$tmp/err"), stdout: $(head -c 200 "$tmp/out")"
	fi
}

# accepted SCRIPT [NAME=VALUE]: the checks let it through to the stand-ins
accepted() {
	s=$1
	shift
	run "$s" "$@"
	if grep -q "for the default" "$tmp/err"; then
		not_ok "$s ${*:-(defaults)} refused: $(cat "$tmp/err")"
	else
		ok "$s ${*:-(defaults)} passes the checks (exit $rc at the stand-ins)"
	fi
}

refused pipeline-speedup.sh STEPS=x
refused pipeline-speedup.sh WARMUP=-1
refused pipeline-speedup.sh ROUNDS=0
refused parallel-cpu.sh STEPS=08
refused parallel-cpu.sh WARMUP=abc
refused sim-vs-real.sh STEPS=6
refused profile-vs-step.sh STEPS=2
refused async-schedules.sh SHORT=0
refused async-schedules.sh LONG=16
refused async-schedules.sh ROUNDS=x
refused async-schedules.sh STAGES=0
refused gpt-cpu.sh STEPS=1e3
refused gpt-cpu.sh WARMUP=x
refused gpt-cpu.sh PROFILE=yes
refused gpt2-kernels.sh M=0
refused gpt2-kernels.sh STEPS=x
refused gpt2-kernels.sh TOP=-5
refused gpt2-kernels.sh MAX_LAUNCHES=1234567890
refused gpt2-124m.sh STEPS=0
refused gpt2-124m.sh WARMUP=x
refused gpt2-124m.sh M=x
refused gpt2-124m.sh TORCH_MB=0
refused gpt2-124m.sh WHOLE=2
refused gpt2-124m.sh COMPILE=yes
refused cpu-vs-torch.sh JOBS=fashon
refused cpu-vs-torch.sh "JOBS= "
refused cpu-vs-torch.sh QUICK=2
refused cpu-vs-torch.sh ONECORE=x
refused cpu-vs-torch.sh FM_STEPS=0
refused cpu-vs-torch.sh GPT_STEPS=x
refused cpu-vs-torch.sh CORES=0
refused cpu-vs-torch.sh CORES=$(($(nproc) + 1))
refused gpt2-124m.sh VARIANTS=PIPEHOST_ATTN_CUDDN=1
refused gpt2-124m.sh WHOLE_VARIANTS=PIPEHOST_ATTN_MMA
refused gpt2-124m.sh "VARIANTS=PIPEHOST_ATTN_MMA=1 ATTN_CUDNN=1"

# scripts/gpu-session.sh check: run's environment, as a device call gets it
gpu_check() { # NAME=VALUE ...: out/err/rc in $tmp
	env "$@" timeout 60 bash "$top_srcdir/scripts/gpu-session.sh" check >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
}
for bad in PH_GPU_BENCH=gtp2 PH_GPU_BUDGET=560s PH_GPU_KERNEL_M="1 x" VARIANTS=PIPEHOST_ATTN_CUDNN \
	WHOLE_VARIANTS=PIPEHOST_COLSUM_SPLT=0 STEPS=0 PH_GPU_TORCH=no PH_GPU_CORE=lst; do
	gpu_check "$bad"
	if [ "$rc" -eq 1 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -Fq "gpu-session.sh: $bad " "$tmp/err"; then
		ok "gpu-session.sh check $bad: $(cat "$tmp/err")"
	else
		not_ok "gpu-session.sh check $bad: exit $rc: $(head -c 300 "$tmp/err") $(head -c 200 "$tmp/out")"
	fi
done
# the calls docs/gpu-session.md plans for the next GPU
gpu_check PH_GPU_BUDGET=560 PH_GPU_BENCH=gpt2 \
	VARIANTS="PIPEHOST_ATTN_MMA=1 PIPEHOST_ATTN_CUDNN=1 PIPEHOST_ATTN_CUDNN=2 PIPEHOST_ATTN_SPLIT=0 PIPEHOST_COLSUM_SPLIT=0" \
	WHOLE=1 WHOLE_VARIANTS="PIPEHOST_ATTN_CUDNN=1 PIPEHOST_ATTN_CUDNN=2 PIPEHOST_ATTN_MMA=1 PIPEHOST_COLSUM_SPLIT=0" COMPILE=0
[ "$rc" -eq 0 ] && ok "gpu-session.sh check: the next session's call 1 passes" ||
	not_ok "call 1's environment refused: $(cat "$tmp/err")"
gpu_check PH_GPU_CORE=last PH_GPU_BENCH="gpt2 kernels" PH_GPU_KERNEL_M="1 8" VARIANTS= WHOLE=1 COMPILE=0
[ "$rc" -eq 0 ] && ok "gpu-session.sh check: the next session's call 2 passes" ||
	not_ok "call 2's environment refused: $(cat "$tmp/err")"

# gpt2-124m.sh's fastest whole-batch run (WINNER_FILE, which the device's
# next call takes with PH_GPU_CORE=last): on a stand-in GPU and a stand-in
# pipehost whose step time and loss depend on the switch, the fastest run
# whose loss stays within 2% of the default's wins; a faster run with
# another loss does not.
mkdir -p "$tmp/gpu/bin" "$tmp/gpu/build"
printf '#!/bin/sh\necho "GPU 0: stand-in (UUID: none)"\n' >"$tmp/gpu/bin/nvidia-smi"
cat >"$tmp/gpu/build/pipehost" <<'EOF2'
#!/bin/sh
met="" mb=8
while [ $# -gt 0 ]; do
	case $1 in
	--set) case $2 in run.metrics=*) met=${2#*=} ;; run.micro_batches=*) mb=${2#*=} ;; esac; shift 2 ;;
	*) shift ;;
	esac
done
ms=50 loss=3.0
[ "$mb" = 1 ] && ms=33
[ "${PIPEHOST_ATTN_CUDNN:-}" = 1 ] && ms=24
[ "${PIPEHOST_ATTN_CUDNN:-}" = 2 ] && ms=23
[ "${PIPEHOST_ATTN_MMA:-}" = 1 ] && ms=20 loss=3.5
awk -v ms="$ms" -v l="$loss" 'BEGIN { for (i = 1; i <= 7; i++) printf "{\"step\":%d,\"elapsed_s\":%.3f,\"loss\":%s}\n", i, i * ms / 1000, l }' >"$met"
EOF2
chmod +x "$tmp/gpu/bin/nvidia-smi" "$tmp/gpu/build/pipehost"
winner() { # WHOLE_VARIANTS -> the winner file's line in $tmp/win, stdout in $tmp/out
	rm -f "$tmp/win"
	env PATH="$tmp/gpu/bin:$PATH" PYTHON=false STEPS=5 WARMUP=2 VARIANTS= COMPILE=0 WHOLE_VARIANTS="$1" \
		WINNER_FILE="$tmp/win" timeout 60 sh "$bench/gpt2-124m.sh" "$tmp/gpu/build" >"$tmp/out" 2>"$tmp/err" </dev/null
}
winner "PIPEHOST_ATTN_CUDNN=1 PIPEHOST_ATTN_CUDNN=2 PIPEHOST_ATTN_MMA=1"
if [ "$(cat "$tmp/win" 2>/dev/null)" = PIPEHOST_ATTN_CUDNN=2 ] &&
	grep -q '^pipehost fastest, batch as 1 micro-batch: PIPEHOST_ATTN_CUDNN=2 (356174 tokens/s' "$tmp/out"; then
	ok "gpt2-124m.sh: the fastest whole-batch run with the default's loss wins: $(grep fastest "$tmp/out")"
else
	not_ok "gpt2-124m.sh's winner: file '$(cat "$tmp/win" 2>/dev/null)', $(grep fastest "$tmp/out") $(head -c 300 "$tmp/err")"
fi
winner "PIPEHOST_ATTN_MMA=1"
if [ -f "$tmp/win" ] && [ -z "$(cat "$tmp/win")" ] && grep -q 'micro-batch: default kernels' "$tmp/out"; then
	ok "gpt2-124m.sh: a faster run with another loss loses to the default kernels"
else
	not_ok "gpt2-124m.sh's winner with only a differing run: file '$(cat "$tmp/win" 2>/dev/null)', $(grep fastest "$tmp/out")"
fi

# every switch a variant may set is still read by the sources
. "$bench/args-lib.sh"
for sw in $bench_switches; do
	if grep -rqF "\"$sw\"" "$top_srcdir/core" "$top_srcdir/plugins"; then
		ok "$sw is read by the sources"
	else
		not_ok "$sw is in bench/args-lib.sh's bench_switches but no source reads \"$sw\""
	fi
done

for s in pipeline-speedup.sh parallel-cpu.sh sim-vs-real.sh profile-vs-step.sh async-schedules.sh gpt-cpu.sh \
	gpt2-kernels.sh gpt2-124m.sh cpu-vs-torch.sh; do
	accepted "$s"
done
# the smallest values each check allows
accepted pipeline-speedup.sh STEPS=1 WARMUP=0 ROUNDS=1
accepted sim-vs-real.sh STEPS=7
accepted profile-vs-step.sh STEPS=3
accepted async-schedules.sh SHORT=1 LONG=2 STAGES=1
accepted gpt2-124m.sh M=1 WARMUP=0 WHOLE=0 COMPILE=0
accepted cpu-vs-torch.sh JOBS=gpt CORES=1 QUICK=1 ONECORE=1 FM_STEPS=1
finish
