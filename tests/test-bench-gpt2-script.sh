#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/gpt2-124m.sh's bookkeeping, with stand-ins for nvidia-smi and
# pipehost (no GPU here): a GPU session has minutes, and a row that shows
# another run's figures, or a timeout that loses every row, wastes them.
#   - each switch's runs keep their own logs: PIPEHOST_ATTN_CUDNN=1 and =2
#     were once one file name, and both showed =2's peak memory
#   - every finished run prints a "row done:" line at once, so a timeout
#     of the whole script still leaves the rows it finished
#   - a run that fails shows "failed" in its row, the others their figures
#   - each pipehost row shows its run's last loss, and one more than 2%
#     from the default run's is marked: a fast path that trains something
#     else must not pass for the fastest
. "$top_srcdir/tests/lib.sh"

mkdir -p "$tmp/bin" "$tmp/build"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in *-L*) echo "GPU 0: stand-in (UUID: none)" ;; *) echo stand-in ;; esac
EOF
# The stand-in pipehost: run.steps step lines in run.metrics, 30 ms a step
# plus 1 ms per unit of PIPEHOST_ATTN_CUDNN; its peak memory line names the
# switch; its loss is 5.0, 5.05 with PIPEHOST_ATTN_CUDNN=1 (within 2%),
# 5.5 with =2 (not); PH_STUB_FAIL (a value of PIPEHOST_ATTN_CUDNN) fails that run,
# PH_STUB_HANG hangs the first batch-as-one-micro-batch run.
cat >"$tmp/build/pipehost" <<'EOF'
#!/bin/sh
steps=0 met= mb=
while [ $# -gt 0 ]; do
	case "$1" in
	run.steps=*) steps=${1#run.steps=} ;;
	run.metrics=*) met=${1#run.metrics=} ;;
	run.micro_batches=*) mb=${1#run.micro_batches=} ;;
	esac
	shift
done
c=${PIPEHOST_ATTN_CUDNN:-0}
[ -n "${PH_STUB_FAIL:-}" ] && [ "$c" = "$PH_STUB_FAIL" ] && { echo "stand-in failure" >&2; exit 1; }
[ -n "${PH_STUB_HANG:-}" ] && [ "$mb" = 1 ] && exec sleep 20
awk -v n="$steps" -v c="$c" 'BEGIN { l = c == 2 ? 5.5 : 5 + 0.05 * c
	for (i = 1; i <= n; i++) printf "{\"step\":%d,\"loss\":%g,\"elapsed_s\":%.4f}\n", i, l, i * (0.030 + 0.001 * c) }' >"$met"
echo "peak GPU memory (stand-in): 100$c.0 MiB"
EOF
chmod +x "$tmp/bin/nvidia-smi" "$tmp/build/pipehost"

bench() {
	PATH="$tmp/bin:$PATH" PYTHON=false STEPS=5 WARMUP=2 COMPILE=0 \
		VARIANTS="PIPEHOST_ATTN_CUDNN=1 PIPEHOST_ATTN_CUDNN=2" WHOLE=1 \
		WHOLE_VARIANTS="PIPEHOST_ATTN_CUDNN=1 PIPEHOST_ATTN_CUDNN=2" "$@" \
		sh "$top_srcdir/bench/gpt2-124m.sh" "$tmp/build" >"$tmp/out" 2>&1
}

bench env
rc=$?
if [ "$rc" -eq 0 ]; then ok "the script runs with stand-ins"; else not_ok "exit $rc: $(tail -3 "$tmp/out")"; fi
# 30, 31 and 32 ms a step: 8192 tokens / 0.030 s = 273067 tokens/s
for want in "1 rank on cuda:0 | 273067 | 233.6 | 30.0 | 1.00 | 5 |" \
	"1 rank, PIPEHOST_ATTN_CUDNN=1 | 264258 | 226.0 | 31.0 | 0.97 | 5.05 |" \
	"1 rank, PIPEHOST_ATTN_CUDNN=2 | 256000 | 219.0 | 32.0 | 0.94 | 5.5 (differs) |" \
	"batch as 1 micro-batch, PIPEHOST_ATTN_CUDNN=2 | 256000 | 219.0 | 32.0 | 0.94 | 5.5 (differs) |" \
	"PyTorch eager | n/a | | | | |"; do
	if grep -qF "$want" "$tmp/out"; then ok "row: $want"; else not_ok "no row '$want': $(grep '^|' "$tmp/out" | tr '\n' ' ')"; fi
done
for v in 1 2; do
	if grep -q "^  pipehost 1 rank, PIPEHOST_ATTN_CUDNN=$v: 100$v.0 MiB" "$tmp/out"; then
		ok "PIPEHOST_ATTN_CUDNN=$v's peak memory is its own run's"
	else
		not_ok "PIPEHOST_ATTN_CUDNN=$v's peak memory: $(grep '^  pipehost 1 rank, PIPEHOST_ATTN' "$tmp/out" | tr '\n' ' ')"
	fi
done

bench env PH_STUB_FAIL=1
if grep -q '^| pipehost, 1 rank, PIPEHOST_ATTN_CUDNN=1 | failed' "$tmp/out" &&
	grep -qF "1 rank, PIPEHOST_ATTN_CUDNN=2 | 256000" "$tmp/out"; then
	ok "a failed run shows 'failed', the next its figures"
else
	not_ok "a failed run: $(grep '^| pipehost, 1 rank, PIPEHOST' "$tmp/out" | tr '\n' ' ')"
fi

# cut short in its first batch-as-one run, as gpu-session.sh's timeout does
PH_STUB_HANG=1 bench timeout 5 env
rc=$?
done_rows=$(grep -c 'row done:' "$tmp/out")
if [ "$rc" -eq 124 ] && [ "$done_rows" -eq 4 ] &&
	grep -q 'row done: pipehost, 1 rank(s), PIPEHOST_ATTN_CUDNN=2, 8 micro-batch(es): 256000 tokens/s, 32.0 ms/step, last loss 5.5$' "$tmp/out"; then
	ok "a timeout keeps the $done_rows runs that finished"
else
	not_ok "timeout: exit $rc, $done_rows 'row done' lines (want 124, 4): $(tail -4 "$tmp/out" | tr '\n' ' ')"
fi
finish
