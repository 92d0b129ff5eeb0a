#!/bin/sh
# SPDX-License-Identifier: MIT
# The [gpu] keys reach the CUDA code: in the emulator build, the kernels a
# one-step run launches (PH_CUEMU_LAUNCHES) change with [gpu] ln_warp (read
# by a layer plugin's .cu) and [gpu] optim_many (read by the engine), the
# INI key winning over the PIPEHOST_* variable, which stays the fallback.
# Skips without the emulator (a real GPU has no launch counts to read).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/gpu-lib.sh"
[ -n "${PH_CUEMU:-}" ] || skip "needs the CUDA emulator's launch counts (configure --enable-cuda-emulator)"
need_gpus 1

# launches NAME ARGS...: a one-step tiny-lm run on cuda:0 with ARGS; the
# kernel launches per name into $tmp/NAME.launches
launches() {
	name=$1
	shift
	PH_CUEMU_LAUNCHES=1 "$PIPEHOST" -c "$fixtures/tiny-lm.ini" --set run.steps=1 --set run.stages=1 \
		--set run.devices=cuda:0 --set run.eval=no "$@" </dev/null >"$tmp/$name.log" 2>&1 ||
		echo "cuemu: failed $(tail -2 "$tmp/$name.log" | tr '\n' ' ')" >>"$tmp/$name.log"
	sed -n 's/^cuemu: *\([0-9][0-9]*\)  \(.*\)$/\2 \1/p' "$tmp/$name.log" >"$tmp/$name.launches"
}
# count NAME KERNEL: its launches in NAME's run (0 if none)
count() {
	c=$(awk -v k="$2" '$1 == k { print $2 }' "$tmp/$1.launches")
	echo "${c:-0}"
}
# expect DESC NAME KERNEL OP N: count NAME KERNEL OP N (test's -gt, -eq)
expect() {
	got=$(count "$2" "$3")
	if [ "$got" "$4" "$5" ]; then
		ok "$1: $3 launched $got times"
	else
		not_ok "$1: $3 launched $got times, want $4 $5; $(grep -v '^cuemu:  ' "$tmp/$2.log" | tail -3 | tr '\n' ' ')"
	fi
}

unset PIPEHOST_LN_WARP PIPEHOST_OPTIM_MANY
launches auto
expect "auto, no variable" auto ph_layernorm_fwd_warp_kernel -gt 0
expect "auto, no variable" auto k_update_many -eq 1
launches lnoff --set gpu.ln_warp=off
expect "[gpu] ln_warp = off" lnoff ph_layernorm_fwd_warp_kernel -eq 0
expect "[gpu] ln_warp = off" lnoff ph_layernorm_fwd_kernel -gt 0
PIPEHOST_LN_WARP=0 launches envoff
expect "PIPEHOST_LN_WARP=0, the fallback" envoff ph_layernorm_fwd_warp_kernel -eq 0
PIPEHOST_LN_WARP=0 launches lnon --set gpu.ln_warp=on
expect "[gpu] ln_warp = on wins over PIPEHOST_LN_WARP=0" lnon ph_layernorm_fwd_warp_kernel -gt 0
launches manyoff --set gpu.optim_many=off
expect "[gpu] optim_many = off" manyoff k_update_many -eq 0
PIPEHOST_OPTIM_MANY=0 launches manyon --set gpu.optim_many=on
expect "[gpu] optim_many = on wins over PIPEHOST_OPTIM_MANY=0" manyon k_update_many -eq 1

finish
