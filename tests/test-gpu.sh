#!/bin/sh
# SPDX-License-Identifier: MIT
# Whole jobs on one GPU (tests/fixtures/tiny.ini: conv, relu, maxpool,
# flatten, linear, dropout, softmax_xent; 20 AdamW steps, batch 32):
#  - 1 rank on cuda:0 against 4 ranks all on cuda:0 (1F1B, 8 micro-batches):
#    the saved weights must be byte-identical, as they are on the CPU
#    (DESIGN.md): the kernels are deterministic and every stage adds its
#    micro-batches' gradients in the order 0..m-1 whatever the schedule, so
#    no tolerance is needed; on a mismatch the message says how many floats
#    differ and by how much.  Likewise 2 ranks (GPipe, an explicit device
#    list), ZB-H1 (the split backward), interleaved, and recomputation;
#  - the CPU against the GPU on the same job: the first step's loss (the
#    initial weights' forward) within 1e-5 relative, the last step's within
#    1e-3 (AdamW amplifies last-bit differences in tiny gradients, so the
#    runs drift apart a little over 20 steps), and the weights not
#    byte-identical (else the job never reached the GPU); and SGD with a
#    hard gradient clip likewise (the clip reached the optimizer's kernel).
#    These hold on a real GPU as in the emulator (which sums in double):
#    fp32 is fp32 there too (no TF32: CUBLAS_COMPUTE_32F, CUDNN_FMA_MATH;
#    cuDNN's FFT and Winograd algorithms passed over; no atomics), so a
#    step differs from the CPU's by reordered float sums (~1e-7 relative),
#    and the first loss has 100x of room; the ok lines print the relative
#    differences, to narrow the bounds from a GPU's figures;
#  - the step's end with all of a rank's tensors in one launch against one
#    launch per tensor (PIPEHOST_OPTIM_MANY=0): byte-identical, AdamW, SGD
#    and Lion (whose last loss is also held to the CPU's, within 1e-3);
#  - bf16: 1 against 4 ranks byte-identical, the first loss within 2e-2 of
#    fp32's, the last loss a finite number; products from bf16 copies
#    against PIPEHOST_GEMM_CAST=0 (byte-identical in the emulator, the last
#    loss within 2e-2 on a GPU), for tiny.ini and the GPT blocks;
#  - 2 replicas on cuda:0: 3 ranks against 1 rank byte-identical;
#  - GPT blocks (tiny-lm.ini at d = 32): 4 ranks against 1 byte-identical,
#    fp32 and bf16 (flash attention, cuBLASLt epilogues);
#  - [partition] cost = profile measures on the GPU, with a cache of its own;
#  - a device the machine lacks is refused with one line;
#  - the peak GPU memory line shows the parameters' bytes, its phases
#    adding up to the peak; a tied head on its table's rank shares the
#    table's memory (6.0 MiB less than two copies, the same weights);
#  - the loss writes the logits' gradient over the logits: the same
#    weights as with a buffer of its own, 8 MiB less at T = 128 and a
#    vocabulary of 16384;
#  - under mpirun, one pipeline split over processes (links through host
#    copies): byte-identical to one process for 1F1B, devices = auto, a
#    resume, the GPT blocks' tie, and 2bw resumed (W(t-1) gathered);
#    2 replicas each split over 2 processes (their sum through the host),
#    byte-identical to 2 replicas in one process; 4 replicas on 2
#    processes sharing cuda:0 likewise (found, and the sum taken through
#    the host, since NCCL refuses a shared GPU); PIPEHOST_NCCL=0 said at
#    the start; a weight tied into two other processes refused in one
#    line.
# Skips (exit 77) without a GPU (nvidia-smi -L) or with a pipehost built
# without CUDA.  etc/fashion-mnist.ini on devices = auto is too slow for a
# test: bench/fashion-mnist-gpu.sh runs it.
# shellcheck disable=SC2154 # make check sets top_srcdir
. "$top_srcdir/tests/lib.sh"
# shellcheck source=tests/gpu-lib.sh
. "$top_srcdir/tests/gpu-lib.sh"
need_gpus 1

gpu="--set run.devices=cuda:0 --set run.micro_batches=8"

# shellcheck disable=SC2086 # $gpu is a list of options
if train g1 $gpu --set run.stages=1 --set schedule.type=1f1b; then
	ok "reference: 1 rank on cuda:0, 8 micro-batches (loss $(loss_at g1 1) -> $(loss_at g1 last))"
else
	not_ok "1 rank on cuda:0: run failed: $(tail -3 "$tmp/g1.log")"
fi

# The peak GPU memory line (issue 21): fc1 of 20000 units makes the
# parameters 1,481,250 floats; weights, gradients and Adam's two moments
# are 16 bytes each, 22.6 MiB, which the parameters' phase must show (a
# real GPU rounds allocations up, hence the 1.5x), and the phases must
# add up to the peak.
# shellcheck disable=SC2086 # $gpu is a list of options
if train pm $gpu --set run.stages=1 --set "layer fc1.units=20000" --set run.steps=2; then
	line=$(grep '^peak GPU memory' "$tmp/pm.log")
	if echo "$line" | awk '{
		if (!match($0, /cuda:0 [0-9.]+ MiB \(ranks opened [0-9.]+, parameters and optimizer state [-+][0-9.]+, activations and buffers [-+][0-9.]+, training [-+][0-9.]+\)$/)) exit 1
		s = substr($0, RSTART); gsub(/[^0-9.+-]+/, " ", s); n = split(s, v, " ")
		# v: 0 (of cuda:0), peak, opened, params, buffers, training
		if (v[4] < 22.6 * 0.999 || v[4] > 22.6 * 1.5) exit 1
		d = v[3] + v[4] + v[5] + v[6] - v[2]; if (d < -0.3 || d > 0.3) exit 1
	}'; then
		ok "the peak GPU memory line: ${line#*: }"
	else
		not_ok "the peak GPU memory line, want the parameters' 22.6 MiB and phases adding up: '$line'"
	fi
else
	not_ok "the memory run failed: $(tail -3 "$tmp/pm.log")"
fi

# name, description, options: each must give g1's weights
while read -r name desc opts; do
	desc=$(echo "$desc" | tr _ ' ')
	# shellcheck disable=SC2086 # $gpu and $opts are lists of options
	if train "$name" $gpu $opts; then
		same_weights "$desc" g1 "$name"
	else
		not_ok "$desc: run failed: $(tail -3 "$tmp/$name.log")"
	fi
done <<'EOF'
g4 4_ranks_on_cuda:0,_1F1B --set run.stages=4 --set schedule.type=1f1b
g2 2_ranks_(cuda:0,cuda:0),_GPipe --set run.stages=2 --set run.devices=cuda:0,cuda:0 --set schedule.type=gpipe
gz ZB-H1_(split_backward),_2_ranks --set run.stages=2 --set schedule.type=zb-h1
gi interleaved,_2_ranks_x_2_chunks --set run.stages=2 --set run.chunks=2 --set schedule.type=interleaved
gr recompute_=_yes,_1F1B,_3_ranks --set run.stages=3 --set run.recompute=yes --set schedule.type=1f1b
EOF

# Replicas on one GPU: the gradient sum (a copy and a kernel, in replica
# order) is as deterministic as the rest: 2 replicas of 1 rank and of
# 3 ranks (GPipe) give the same bits.
# shellcheck disable=SC2086
if train d1 $gpu --set run.replicas=2 --set run.stages=1 && train d3 $gpu --set run.replicas=2 --set run.stages=3 \
	--set schedule.type=gpipe; then
	same_weights "2 replicas on cuda:0: 3 ranks (GPipe) against 1 rank" d1 d3
else
	not_ok "2 replicas on cuda:0: run failed: $(tail -3 "$tmp/d1.log") $(tail -3 "$tmp/d3.log")"
fi

# CPU against GPU
if train c1 --set run.devices=cpu --set run.micro_batches=8 --set run.stages=1; then
	a=$(loss_at g1 1) b=$(loss_at c1 1)
	if rel_within "$a" "$b" 1e-5; then
		ok "first step's loss: GPU $a, CPU $b (relative difference $(rel_diff "$a" "$b"), within 1e-5)"
	else
		not_ok "first step's loss: GPU $a, CPU $b: relative difference $(rel_diff "$a" "$b") > 1e-5"
	fi
	a=$(loss_at g1 last) b=$(loss_at c1 last)
	if rel_within "$a" "$b" 1e-3; then
		ok "last step's loss: GPU $a, CPU $b (relative difference $(rel_diff "$a" "$b"), within 1e-3)"
	else
		not_ok "last step's loss: GPU $a, CPU $b: relative difference $(rel_diff "$a" "$b") > 1e-3"
	fi
	if cmp -s "$tmp/g1.st" "$tmp/c1.st"; then
		not_ok "GPU weights byte-identical to the CPU's: did the job run on the GPU at all?"
	else
		ok "GPU weights differ from the CPU's in the last bits ($(weights_diff "$tmp/c1.st" "$tmp/g1.st"))"
	fi
else
	not_ok "the same job on the CPU: run failed: $(tail -3 "$tmp/c1.log")"
fi

# The optimizer's kernel (the clip, the update and the zeroing of the
# gradients in one pass): SGD with momentum and the gradient norm clipped
# hard (clip = 0.05: every step clips) on the GPU against the same job on
# the CPU, the last loss within 1e-3; and apart from the unclipped GPU
# run's by more than 1e-2, so the clip took effect (SGD moves by the
# clipped gradient's size, where AdamW would hide a dropped clip).
sgd="--set optimizer.type=sgd --set optimizer.lr=0.05"
# shellcheck disable=SC2086 # $gpu and $sgd are lists of options
if train s1 $gpu --set run.stages=1 $sgd --set optimizer.clip=0.05 &&
	train sc --set run.devices=cpu --set run.micro_batches=8 --set run.stages=1 $sgd --set optimizer.clip=0.05 &&
	train s0 $gpu --set run.stages=1 $sgd; then
	a=$(loss_at s1 last) b=$(loss_at sc last) c=$(loss_at s0 last)
	if rel_within "$a" "$b" 1e-3 && ! rel_within "$a" "$c" 1e-2; then
		ok "SGD, clipped: last loss GPU $a, CPU $b (relative difference $(rel_diff "$a" "$b"), within 1e-3); unclipped $c ($(rel_diff "$a" "$c") apart)"
	else
		not_ok "SGD, clipped: last loss GPU $a, CPU $b (want within 1e-3: $(rel_diff "$a" "$b")), unclipped GPU $c (want apart by > 1e-2: $(rel_diff "$a" "$c"))"
	fi
else
	not_ok "SGD with clipping: run failed: $(tail -3 "$tmp/s1.log") $(tail -3 "$tmp/sc.log") $(tail -3 "$tmp/s0.log")"
fi

# The step's end batched (every tensor of a rank in one launch for the
# update, two for the clip norm) against one launch per tensor
# (PIPEHOST_OPTIM_MANY=0): the same bytes, AdamW on 3 ranks and clipped SGD
# shellcheck disable=SC2086
if train m3 $gpu --set run.stages=3 --set optimizer.clip=0.5 &&
	PIPEHOST_OPTIM_MANY=0 train o3 $gpu --set run.stages=3 --set optimizer.clip=0.5 &&
	PIPEHOST_OPTIM_MANY=0 train o1 $gpu --set run.stages=1 $sgd --set optimizer.clip=0.05; then
	same_weights "AdamW, clip 0.5, 3 ranks: the step's end batched" o3 m3
	same_weights "SGD, clip 0.05: the step's end batched" o1 s1
else
	not_ok "PIPEHOST_OPTIM_MANY=0: run failed: $(tail -3 "$tmp/m3.log") $(tail -3 "$tmp/o3.log") $(tail -3 "$tmp/o1.log")"
fi

# Lion (an element moves by exactly lr, or not at all, so its kernels
# differ from AdamW's in kind): batched against one launch per tensor
# byte-identical, the last loss within 1e-3 of the CPU's, and apart from
# AdamW's (g1) by more than 1e-2, so the kernel ran Lion's rule.
lion="--set optimizer.type=lion --set optimizer.lr=0.001 --set optimizer.beta2=0.99 --set optimizer.clip=0.5"
# shellcheck disable=SC2086
if train l1 $gpu --set run.stages=1 $lion &&
	PIPEHOST_OPTIM_MANY=0 train l0 $gpu --set run.stages=1 $lion &&
	train lc --set run.devices=cpu --set run.micro_batches=8 --set run.stages=1 $lion; then
	same_weights "Lion, clip 0.5: the step's end batched" l0 l1
	a=$(loss_at l1 last) b=$(loss_at lc last) c=$(loss_at g1 last)
	if rel_within "$a" "$b" 1e-3 && ! rel_within "$a" "$c" 1e-2; then
		ok "Lion: last loss GPU $a, CPU $b (relative difference $(rel_diff "$a" "$b"), within 1e-3); AdamW's $c ($(rel_diff "$a" "$c") apart)"
	else
		not_ok "Lion: last loss GPU $a, CPU $b (want within 1e-3: $(rel_diff "$a" "$b")), AdamW's $c (want apart by > 1e-2: $(rel_diff "$a" "$c"))"
	fi
else
	not_ok "Lion: run failed: $(tail -3 "$tmp/l1.log") $(tail -3 "$tmp/l0.log") $(tail -3 "$tmp/lc.log")"
fi

# bf16
bf="$gpu --set run.precision=bf16"
# shellcheck disable=SC2086
if train b1 $bf --set run.stages=1 --set schedule.type=1f1b; then
	a=$(loss_at b1 1) b=$(loss_at g1 1)
	if rel_within "$a" "$b" 2e-2; then
		ok "bf16: first step's loss $a, fp32's $b (relative difference $(rel_diff "$a" "$b"), within 2e-2)"
	else
		not_ok "bf16: first step's loss $a, fp32's $b: relative difference $(rel_diff "$a" "$b") > 2e-2"
	fi
	a=$(loss_at b1 last)
	if is_number "$a"; then
		ok "bf16: last step's loss $a (fp32: $(loss_at g1 last))"
	else
		not_ok "bf16: last step's loss is '$a'"
	fi
	# shellcheck disable=SC2086
	if train b4 $bf --set run.stages=4 --set schedule.type=1f1b; then
		same_weights "bf16, 4 ranks on cuda:0, 1F1B" b1 b4
	else
		not_ok "bf16, 4 ranks on cuda:0: run failed: $(tail -3 "$tmp/b4.log")"
	fi
	# The products read bf16 copies: each weight's made once after every
	# optimizer step, the rest staged per product.  PIPEHOST_GEMM_CAST=0
	# has cuBLAS round the fp32 inputs itself: the same rounding, so in the
	# emulator the weights after 20 steps are byte-identical (a copy left
	# stale by an update would not be); a GPU takes other kernels for the
	# two, and the last losses agree within 2e-2.
	# shellcheck disable=SC2086
	if PIPEHOST_GEMM_CAST=0 train bn $bf --set run.stages=2 --set schedule.type=1f1b; then
		if [ -n "${PH_CUEMU:-}" ]; then
			same_weights "bf16: products from bf16 copies against cuBLAS rounding fp32 itself (emulator)" b1 bn
		else
			a=$(loss_at b1 last) b=$(loss_at bn last)
			if rel_within "$a" "$b" 2e-2; then
				ok "bf16: last loss $a from bf16 copies, $b with PIPEHOST_GEMM_CAST=0 (relative difference $(rel_diff "$a" "$b"), within 2e-2)"
			else
				not_ok "bf16: last loss $a from bf16 copies, $b with PIPEHOST_GEMM_CAST=0: relative difference $(rel_diff "$a" "$b") > 2e-2"
			fi
		fi
	else
		not_ok "bf16 with PIPEHOST_GEMM_CAST=0: run failed: $(tail -3 "$tmp/bn.log")"
	fi
else
	not_ok "bf16, 1 rank on cuda:0: run failed: $(tail -3 "$tmp/b1.log")"
fi

# A transformer on one GPU: tiny-lm.ini widened to d = 32 (2 heads of 16,
# so that bf16 takes flash attention and the GELU fused into the product),
# on text made of our own C sources: 4 ranks (1F1B, 8 micro-batches)
# against 1, byte-identical, in fp32 and in bf16.
cat "$top_srcdir"/core/*.c >"$tmp/corpus.txt"
lm() { # NAME OPTIONS...
	lname=$1
	shift
	"$PIPEHOST" -c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/corpus.txt" --set "layer embed.dim=32" \
		--set run.devices=cuda:0 --set run.micro_batches=8 --set run.steps=4 --set schedule.type=1f1b \
		--save-weights "$tmp/$lname.st" "$@" </dev/null >"$tmp/$lname.log" 2>&1
}
for prec in fp32 bf16; do
	if lm "l1$prec" --set run.stages=1 --set run.precision=$prec &&
		lm "l4$prec" --set run.stages=4 --set run.precision=$prec; then
		same_weights "GPT blocks, $prec: 4 ranks on cuda:0 against 1" "l1$prec" "l4$prec"
	else
		not_ok "GPT blocks, $prec, 1 or 4 ranks on cuda:0: run failed: $(tail -2 "$tmp/l1$prec.log") $(tail -2 "$tmp/l4$prec.log")"
	fi
done
# the fused attention with its tiles in registers (flash_mma.cuh,
# PIPEHOST_ATTN_MMA=1, off by default until a GPU has timed it): 4 ranks
# give 1 rank's bytes, and its last loss is within bf16's reach of the
# default kernels' (at T = 16, one tile, the two may agree to the bit:
# the same products, and no running max to move).  The emulator counts
# the launches, which says the kernels in registers ran.
if PH_CUEMU_LAUNCHES=1 PIPEHOST_ATTN_MMA=1 lm l1mma --set run.stages=1 --set run.precision=bf16 --set run.log_every=1 \
	--set "run.metrics=$tmp/l1mma.jsonl" &&
	PIPEHOST_ATTN_MMA=1 lm l4mma --set run.stages=4 --set run.precision=bf16 &&
	lm l1wmma --set run.stages=1 --set run.precision=bf16 --set run.log_every=1 \
		--set "run.metrics=$tmp/l1wmma.jsonl"; then
	same_weights "GPT blocks, bf16, attention in registers (PIPEHOST_ATTN_MMA=1): 4 ranks on cuda:0 against 1" \
		l1mma l4mma
	a=$(loss_at l1mma last) b=$(loss_at l1wmma last)
	ran=yes
	[ -n "${PH_CUEMU:-}" ] && ! grep -Eq 'cuemu: +[1-9][0-9]*  ph_fam_dq_kernel' "$tmp/l1mma.log" && ran=no
	if is_number "$a" && rel_within "$a" "$b" 2e-2 && [ "$ran" = yes ]; then
		ok "attention in registers: last loss $a, default kernels $b (relative difference $(rel_diff "$a" "$b"), within 2e-2)"
	else
		not_ok "attention in registers: last loss $a against the default kernels' $b (want within 2e-2); ph_fam kernels launched: $ran"
	fi
else
	not_ok "GPT blocks, bf16, PIPEHOST_ATTN_MMA=1: run failed: $(tail -2 "$tmp/l1mma.log") $(tail -2 "$tmp/l4mma.log") $(tail -2 "$tmp/l1wmma.log")"
fi
# cuDNN's fused attention (PIPEHOST_ATTN_CUDNN=1, cudnn_sdpa.h; gpt_block
# without dropout): in a build with cudnn-frontend, 4 ranks (4 threads,
# each with its cuDNN handle and graphs) give 1 rank's bytes, and the last
# loss is within bf16's reach of our kernels' on the same job; in a build
# without it (every emulator build) the run stops with the line that
# names --with-cudnn-frontend, and nothing trains in silence.
cud() { # NAME OPTIONS...: the job above without dropout, bf16
	cname=$1
	shift
	lm "$cname" --set "layer block.dropout=0" --set run.precision=bf16 "$@"
}
if grep -q '^#define PH_WITH_CUDNN_FE 1' "$top_builddir/build-config.h" 2>/dev/null; then
	if PIPEHOST_ATTN_CUDNN=1 cud l1cudnn --set run.stages=1 --set run.log_every=1 \
		--set "run.metrics=$tmp/l1cudnn.jsonl" &&
		PIPEHOST_ATTN_CUDNN=1 cud l4cudnn --set run.stages=4 &&
		cud l1ours --set run.stages=1 --set run.log_every=1 --set "run.metrics=$tmp/l1ours.jsonl"; then
		same_weights "GPT blocks, bf16, cuDNN's attention (PIPEHOST_ATTN_CUDNN=1): 4 ranks on cuda:0 against 1" \
			l1cudnn l4cudnn
		a=$(loss_at l1cudnn last) b=$(loss_at l1ours last)
		if is_number "$a" && rel_within "$a" "$b" 2e-2; then
			ok "cuDNN's attention: last loss $a, pipehost's kernels $b (relative difference $(rel_diff "$a" "$b"), within 2e-2)"
		else
			not_ok "cuDNN's attention: last loss $a against pipehost's kernels' $b (want within 2e-2)"
		fi
	else
		not_ok "GPT blocks, bf16, PIPEHOST_ATTN_CUDNN=1: run failed: $(tail -2 "$tmp/l1cudnn.log") $(tail -2 "$tmp/l4cudnn.log") $(tail -2 "$tmp/l1ours.log")"
	fi
elif PIPEHOST_ATTN_CUDNN=1 cud l1cudnn --set run.stages=1; then
	not_ok "PIPEHOST_ATTN_CUDNN=1 in a build without cudnn-frontend: the run trained (exit 0) instead of refusing"
else
	line=$(grep -- '--with-cudnn-frontend' "$tmp/l1cudnn.log" | head -1)
	if [ -n "$line" ] && [ "$(grep -c -- '--with-cudnn-frontend' "$tmp/l1cudnn.log")" -le 2 ]; then
		ok "PIPEHOST_ATTN_CUDNN=1 without cudnn-frontend: refused: $line"
	else
		not_ok "PIPEHOST_ATTN_CUDNN=1 without cudnn-frontend: failed without naming --with-cudnn-frontend: $(tail -3 "$tmp/l1cudnn.log")"
	fi
fi
# the tied head (embedding and logits on one rank, then on two) with bf16
# copies against cuBLAS rounding: byte-identical in the emulator
if [ -n "${PH_CUEMU:-}" ]; then
	if PIPEHOST_GEMM_CAST=0 lm l2nocast --set run.stages=2 --set run.precision=bf16; then
		same_weights "GPT blocks, bf16: products from bf16 copies against cuBLAS rounding fp32 itself (emulator)" \
			l1bf16 l2nocast
	else
		not_ok "GPT blocks, bf16, PIPEHOST_GEMM_CAST=0: run failed: $(tail -2 "$tmp/l2nocast.log")"
	fi
fi
if [ -f "$tmp/l1fp32.st" ] && cmp -s "$tmp/l1fp32.st" "$tmp/l1bf16.st"; then
	not_ok "GPT blocks: bf16 weights byte-identical to fp32's: the precision never reached the GPU"
fi
# The tied head on its source's rank shares the token table's weights
# and Adam state: at vocab 16384 x d 32 that is 524,288 floats x 12 bytes,
# 6.0 MiB less in the parameters' phase of the peak line than with
# PIPEHOST_TIE_SHARE=0 (two copies), and the same weights.
params_mib() { sed -n 's/^peak GPU memory.*parameters and optimizer state +\([0-9.]*\),.*/\1/p' "$tmp/$1.log"; }
if lm tshare --set run.stages=1 --set "layer embed.vocab=16384" --set "layer head.units=16384" --set run.steps=2 &&
	PIPEHOST_TIE_SHARE=0 lm tcopy --set run.stages=1 --set "layer embed.vocab=16384" --set "layer head.units=16384" \
		--set run.steps=2; then
	a=$(params_mib tshare) b=$(params_mib tcopy)
	if cmp -s "$tmp/tshare.st" "$tmp/tcopy.st" &&
		awk -v a="$a" -v b="$b" 'BEGIN { d = b - a; exit !(a != "" && d > 4.5 && d < 8) }'; then
		ok "the tied head shares the table: parameters +$a MiB against +$b MiB with two copies; weights byte-identical"
	else
		not_ok "the tied head sharing the table: parameters +$a MiB against +$b MiB (want 6.0 less), or weights differ"
	fi
else
	not_ok "the tied head sharing the table: run failed: $(tail -2 "$tmp/tshare.log") $(tail -2 "$tmp/tcopy.log")"
fi

# Under bf16 the fused attention core keeps the softmax statistics L2
# [H, T] where the materialised one keeps P [H, T, T], and its output att
# in bf16, and the block's twin says so (ABI 1.6 saved_bytes): at T = 512,
# d = 32, 2 heads and 2 blocks, one sequence in flight, the activations'
# phase of the peak line is 2 x (2 x 512 x 511 + 512 x 16) floats =
# 4.05 MiB smaller than with PIPEHOST_ATTN_FLASH=0 (the materialised core
# under bf16 too).
acts_mib() { sed -n 's/^peak GPU memory.*activations and buffers +\([0-9.]*\),.*/\1/p' "$tmp/$1.log"; }
if lm pflash --set run.stages=1 --set run.precision=bf16 --set data.seq_len=512 --set run.steps=1 &&
	PIPEHOST_ATTN_FLASH=0 lm pmat --set run.stages=1 --set run.precision=bf16 --set data.seq_len=512 \
		--set run.steps=1; then
	a=$(acts_mib pflash) b=$(acts_mib pmat)
	if awk -v a="$a" -v b="$b" 'BEGIN { d = b - a; exit !(a != "" && d > 3.85 && d < 4.15) }'; then
		ok "bf16, fused attention: activations +$a MiB against +$b MiB materialised (4.05 less: L2 for P)"
	else
		not_ok "bf16, fused attention: activations +$a MiB against +$b MiB materialised (want 4.05 less)"
	fi
else
	not_ok "bf16 at T = 512, fused or materialised: run failed: $(tail -2 "$tmp/pflash.log") $(tail -2 "$tmp/pmat.log")"
fi

# The loss writes the logits' gradient over the logits on the GPU too
# (PH_LAYER_DX_OVER_X, plugin ABI 1.7): PIPEHOST_GRAD_IN_PLACE=0 gives the
# same bytes, and the activations' phase of the peak line grows by one
# micro-batch's logits: at T = 128 and a vocabulary of 16384, 128 x 16384
# floats, 8 MiB (less the 16 KiB of [T, d] that buffer holds otherwise).
gip() { # NAME: the run, in place or not as the environment says
	lm "$1" --set run.stages=1 --set run.precision=bf16 --set data.seq_len=128 --set run.steps=2 \
		--set "layer embed.vocab=16384" --set "layer head.units=16384"
}
if gip ginpl && PIPEHOST_GRAD_IN_PLACE=0 gip gapart; then
	a=$(acts_mib ginpl) b=$(acts_mib gapart)
	if awk -v a="$a" -v b="$b" 'BEGIN { d = b - a; exit !(a != "" && d > 6 && d < 10) }'; then
		same_weights "bf16: the logits' gradient over the logits (activations +$a MiB, +$b MiB in a buffer of its own)" \
			gapart ginpl
	else
		not_ok "bf16: the logits' gradient over the logits: activations +$a MiB against +$b MiB apart (want 8 less)"
	fi
else
	not_ok "bf16, logits' gradient in place or apart: run failed: $(tail -2 "$tmp/ginpl.log") $(tail -2 "$tmp/gapart.log")"
fi

# [partition] cost = profile with the ranks on a GPU measures there: the
# table says cuda:0, a second run reads the cache, and neither the CPU nor
# bf16 reads the fp32 GPU's (the key names the device and the precision).
pc="$tmp/profile-cache"
prof() { # NAME OPTIONS...: the plan with measured costs, to $tmp/NAME.plan
	p=$1
	shift
	"$PIPEHOST" -c "$fixtures/tiny.ini" --plan --set run.stages=2 --set partition.cost=profile \
		--set partition.type=dp --set "partition.profile_cache=$pc" "$@" >"$tmp/$p.plan" 2>&1
}
if prof pg1 --set run.devices=cuda:0 && grep -q '^profile: measuring 9 layers on cuda:0 .* fp32' "$tmp/pg1.plan" &&
	[ "$(grep -c '^  [0-9]' "$tmp/pg1.plan")" -ge 9 ]; then
	ok "cost = profile on cuda:0 measures on the GPU ($(grep -m1 '^profile: measuring' "$tmp/pg1.plan" | cut -c1-90))"
else
	not_ok "cost = profile on cuda:0: $(head -3 "$tmp/pg1.plan")"
fi
if prof pg2 --set run.devices=cuda:0 && grep -q '^profile: cache hit .*cuda:0' "$tmp/pg2.plan" &&
	prof pc1 --set run.devices=cpu && grep -q '^profile: measuring 9 layers on cpu' "$tmp/pc1.plan" &&
	prof pb1 --set run.devices=cuda:0 --set run.precision=bf16 && grep -q '^profile: measuring .* bf16' "$tmp/pb1.plan"; then
	ok "cost = profile: the GPU's cache is read again, and kept apart from the CPU's and bf16's"
else
	not_ok "cost = profile cache on a GPU: $(head -1 "$tmp/pg2.plan"); $(head -1 "$tmp/pc1.plan"); $(head -1 "$tmp/pb1.plan")"
fi

expect_error "a GPU the machine lacks" 'asks for cuda:63' -c "$fixtures/tiny.ini" --set run.stages=1 \
	--set run.devices=cuda:63

# One pipeline split over two processes (mpirun, replicas = 1), its ranks
# on GPUs: the links carry activations and gradients as MPI messages by way
# of host copies, and change no arithmetic, so the weights are
# byte-identical to the same ranks in one process.  Both processes may
# share cuda:0 (a machine with one GPU).  tiny.ini (1F1B, 8 micro-batches,
# 2 and 4 ranks, with a checkpoint and resume), then the GPT blocks, whose
# tied head lands in the other process than the token table.
# shellcheck source=tests/mpi-lib.sh
. "$top_srcdir/tests/mpi-lib.sh"
split() { # NAME OPTIONS...: tiny.ini on 2 processes, one pipeline
	sname=$1
	shift
	ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny.ini" \
		--set run.replicas=1 --set run.devices=cuda:0 --set run.micro_batches=8 --set schedule.type=1f1b \
		--save-weights "$tmp/$sname.st" "$@" </dev/null >"$tmp/$sname.log" 2>&1
}
split_lm() { # NAME OPTIONS...: lm's GPT blocks on 2 processes, one pipeline
	sname=$1
	shift
	ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny-lm.ini" \
		--set "data.path=$tmp/corpus.txt" --set "layer embed.dim=32" --set run.devices=cuda:0 \
		--set run.micro_batches=8 --set run.steps=4 --set schedule.type=1f1b --set run.replicas=1 \
		--save-weights "$tmp/$sname.st" "$@" </dev/null >"$tmp/$sname.log" 2>&1
}
if ! ph_have_mpi; then
	ok "a pipeline split over processes on GPUs # SKIP $ph_mpi_why"
else
	# 4 ranks with devices = auto: each process's ranks on the GPU of its
	# place on the node (cuda:0 and cuda:1 where there are two)
	for st in 2 4; do
		devs=cuda:0
		[ "$st" = 4 ] && devs=auto
		if train "sp1r$st" --set run.stages=$st --set run.devices=cuda:0 --set run.micro_batches=8 \
			--set schedule.type=1f1b && split "sp2r$st" --set run.stages=$st --set run.devices=$devs; then
			same_weights "mpirun -np 2, one pipeline of $st ranks (devices = $devs) split over the processes" \
				"sp1r$st" "sp2r$st"
		else
			not_ok "mpirun -np 2, split pipeline of $st ranks (devices = $devs): run failed: $(tail -3 "$tmp/sp2r$st.log")"
		fi
	done
	ck="$tmp/split-ck"
	if split spck --set run.stages=2 --set checkpoint.dir="$ck" --set checkpoint.every=10 &&
		split spres --set run.stages=2 --resume "$ck/step-00000010"; then
		same_weights "mpirun -np 2, split pipeline on cuda:0 resumed at step 10" sp1r2 spres
	else
		not_ok "mpirun -np 2, split pipeline on cuda:0, checkpoint and resume: $(tail -2 "$tmp/spck.log") $(tail -2 "$tmp/spres.log")"
	fi
	if split_lm lmsplit --set run.stages=2 && lm lm1p2 --set run.stages=2; then
		same_weights "mpirun -np 2, GPT blocks on cuda:0 split over the processes (the tie between them)" \
			lm1p2 lmsplit
	else
		not_ok "mpirun -np 2, GPT blocks split over the processes: $(tail -3 "$tmp/lmsplit.log")"
	fi
	# each process holds its own ranks' tensors alone: at vocab 16384 the
	# head's copy of the token table (524,288 floats: weights, gradient
	# and Adam's two, 8.0 MiB) is in process 1, not in process 0, whose
	# parameters' phase of the peak line is that much below one process's
	# two ranks; the weights are the same.  Only the emulator counts each
	# process's memory apart: on a real GPU the peak line's figures come
	# from cudaMemGetInfo, device-wide, and both processes run on cuda:0,
	# so process 0's phases take in whatever process 1 allocates meanwhile
	# (its context and handles: +168.0 against +22.0 MiB on the H200,
	# 2026-11-28); there the weights alone are compared
	if PIPEHOST_TIE_SHARE=0 lm lmv1 --set run.stages=2 --set "layer embed.vocab=16384" \
		--set "layer head.units=16384" --set run.steps=2 &&
		split_lm lmv2 --set run.stages=2 --set "layer embed.vocab=16384" --set "layer head.units=16384" \
			--set run.steps=2; then
		a=$(params_mib lmv1) b=$(params_mib lmv2)
		if [ -z "${PH_CUEMU:-}" ]; then
			same_weights "split over processes at vocab 16384 (memory not compared: both processes share cuda:0, whose cudaMemGetInfo counts both)" \
				lmv1 lmv2
		elif cmp -s "$tmp/lmv1.st" "$tmp/lmv2.st" &&
			awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(b != "" && d > 7.5 && d < 8.5) }'; then
			ok "split over processes, process 0 holds its own ranks' tensors: parameters +$b MiB against +$a MiB in one process; weights byte-identical"
		else
			not_ok "split over processes: process 0's parameters +$b MiB against +$a MiB in one process (want 8.0 less), or weights differ"
		fi
	else
		not_ok "split over processes at vocab 16384: $(tail -2 "$tmp/lmv1.log") $(tail -3 "$tmp/lmv2.log")"
	fi
	# 2bw split over the processes: W(t-1) comes from the GPU of the
	# process that runs each rank into process 0's checkpoint, so the
	# resume ends on the bytes of one process without a stop
	ckb="$tmp/split-2bw"
	if lm lm2bw --set run.stages=2 --set schedule.type=2bw --set run.steps=6 &&
		split_lm sb2bw --set run.stages=2 --set schedule.type=2bw --set run.steps=6 \
			--set checkpoint.dir="$ckb" --set checkpoint.every=3 &&
		split_lm sr2bw --set run.stages=2 --set schedule.type=2bw --set run.steps=6 \
			--resume "$ckb/step-00000003"; then
		same_weights "mpirun -np 2, 2bw split over the processes, resumed at step 3" lm2bw sr2bw
	else
		not_ok "mpirun -np 2, 2bw split, checkpoint and resume: $(tail -2 "$tmp/sb2bw.log") $(tail -2 "$tmp/sr2bw.log")"
	fi
	# one tensor tied to two copies, each in another process: the sum
	# across processes on GPUs takes one copy only, and says so
	if ph_mpirun 3 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tied3.ini" \
		--set run.replicas=1 --set run.devices=cuda:0 </dev/null >"$tmp/t3g.log" 2>&1; then
		not_ok "a weight tied on three processes' GPUs: mpirun exited 0"
	elif grep -q 'pipehost: process [0-2] of 3: layers b and c both tie a.weight, and a pipeline split over processes on GPUs sums one copy in another process only' "$tmp/t3g.log"; then
		ok "a weight tied on three processes' GPUs: refused in one line"
	else
		not_ok "a weight tied on three processes' GPUs: $(grep -v '^-\|^\s*$' "$tmp/t3g.log" | head -2)"
	fi
	# two replicas each split over two processes: the replicas' gradient
	# sum goes through the host, in replica order, as in one process
	if train sprep1 --set run.replicas=2 --set run.stages=2 --set run.devices=cuda:0 \
		--set run.micro_batches=8 --set schedule.type=1f1b &&
		ph_mpirun 4 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny.ini" \
			--set run.replicas=2 --set run.stages=2 --set run.devices=cuda:0 --set run.micro_batches=8 \
			--set schedule.type=1f1b --save-weights "$tmp/sprep4.st" </dev/null >"$tmp/sprep4.log" 2>&1; then
		same_weights "mpirun -np 4, 2 replicas each split over 2 processes on cuda:0" sprep1 sprep4
	else
		not_ok "mpirun -np 4, 2 split replicas on cuda:0: run failed: $(grep -v '^-\|^\s*$' "$tmp/sprep4.log" | tail -2)"
	fi
	# whole pipelines, two a process, both processes on cuda:0: NCCL
	# refuses that, so the sum goes through the host, found and said at
	# the start; the same bytes as the 4 replicas in one process
	if train rep4 --set run.replicas=4 --set run.stages=2 --set run.devices=cuda:0 &&
		ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny.ini" \
			--set run.replicas=4 --set run.stages=2 --set run.devices=cuda:0 --save-weights "$tmp/rep4m.st" \
			</dev/null >"$tmp/rep4m.log" 2>&1 &&
		grep -q '^replicas: gradients summed through host memory over MPI, not NCCL: processes 0 and 1 run rank 0 on one GPU' "$tmp/rep4m.log"; then
		same_weights "mpirun -np 2, 4 replicas (2 a process) sharing cuda:0: $(sed -n 's/^replicas: .*NCCL: //p' "$tmp/rep4m.log")" rep4 rep4m
	else
		not_ok "mpirun -np 2, 4 replicas sharing cuda:0: $(grep -v '^-\|^\s*$' "$tmp/rep4m.log" | tail -2)"
	fi
	# PIPEHOST_NCCL=0 asks for the host's way, and the start says so
	if PIPEHOST_NCCL=0 ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND -x PIPEHOST_NCCL "$PIPEHOST" \
		-c "$fixtures/tiny.ini" --set run.steps=2 --set run.devices=cuda:0 </dev/null >"$tmp/nonccl.log" 2>&1 &&
		grep -q '^replicas: gradients summed through host memory over MPI, not NCCL: PIPEHOST_NCCL=0$' "$tmp/nonccl.log"; then
		ok "PIPEHOST_NCCL=0 under mpirun: $(grep '^replicas:' "$tmp/nonccl.log")"
	else
		not_ok "PIPEHOST_NCCL=0 under mpirun: $(grep -v '^-\|^\s*$' "$tmp/nonccl.log" | tail -2)"
	fi
	# and the GPT blocks, whose tie crosses the processes of each replica
	if lm lmrep1 --set run.stages=2 --set run.replicas=2 --set run.batch=16 &&
		ph_mpirun 4 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny-lm.ini" \
			--set "data.path=$tmp/corpus.txt" --set "layer embed.dim=32" --set run.devices=cuda:0 \
			--set run.micro_batches=8 --set run.steps=4 --set schedule.type=1f1b --set run.stages=2 \
			--set run.replicas=2 --set run.batch=16 --save-weights "$tmp/lmrep4.st" </dev/null >"$tmp/lmrep4.log" 2>&1; then
		same_weights "mpirun -np 4, GPT blocks: 2 replicas each split over 2 processes (the tie across them)" \
			lmrep1 lmrep4
	else
		not_ok "mpirun -np 4, GPT blocks in 2 split replicas: run failed: $(grep -v '^-\|^\s*$' "$tmp/lmrep4.log" | tail -2)"
	fi
fi
finish
