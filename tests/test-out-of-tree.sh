#!/bin/sh
# SPDX-License-Identifier: MIT
# A third party builds a layer against the installed headers (pkg-config)
# and the installed pipehost trains with it.  The layer's CUDA twin
# (tests/example-plugin/leaky_relu_cuda.cu, <pipehost/cuda.h>) is compiled
# with nvcc where the CUDA toolkit is, or with the emulator's compiler in a
# --enable-cuda-emulator build, where it also trains on the emulated GPU;
# without either, the CUDA part is skipped and said so.
. "$top_srcdir/tests/lib.sh"
dest="$tmp/dest"
if make -s -C "$top_builddir" install DESTDIR="$dest" >"$tmp/install.log" 2>&1; then
	ok "make install into a staging directory"
else
	not_ok "make install: $(tail -3 "$tmp/install.log")"
	finish; exit
fi
pc=$(find "$dest" -name pipehost.pc | head -1)
prefix=$(pkg-config --variable=prefix "$pc")
inst="$dest$prefix"
export PKG_CONFIG_PATH="$(dirname "$pc")"
# build_plugin DIR [make args...]: a fresh copy of the example, built in DIR
build_plugin() {
	d=$1
	shift
	cp -r "$top_srcdir/tests/example-plugin" "$d"
	chmod -R u+w "$d"
	rm -f "$d"/*.o "$d"/*.so
	make -s -C "$d" PKG_CONFIG="pkg-config --define-variable=prefix=$inst" "$@" >"$d.log" 2>&1 &&
		[ -f "$d/leaky_relu.so" ]
}
# The CUDA compiler: the emulator's in an emulator build (its runtime is
# preloaded: no library to link), else nvcc where it is installed.
if [ -n "${PH_CUEMU:-}" ]; then
	cuda="emulator"
	set -- NVCC="sh $top_srcdir/tests/cuemu/cuemu-cc.sh ${CXX:-g++}" CUDA_LIBS=
elif [ -x /usr/local/cuda/bin/nvcc ]; then
	cuda="nvcc"
	set -- NVCC=/usr/local/cuda/bin/nvcc
else
	cuda=
	set -- NVCC=
fi
if build_plugin "$tmp/plugin" "$@"; then
	ok "example plugin builds out of tree with pkg-config --cflags pipehost${cuda:+, its CUDA twin with $cuda}"
else
	not_ok "example plugin build: $(tail -3 "$tmp/plugin.log")"
fi
bin="$inst/bin/pipehost"
pdir="$(dirname "$(find "$dest" -name linear.so | head -1)")"
# devices_of DIR: the devices --list-plugins gives leaky_relu from DIR
devices_of() {
	PIPEHOST_PLUGIN_PATH= "$bin" --list-plugins --plugin-dir "$1" --plugin-dir "$pdir" >"$tmp/list" 2>&1
	sed -n '/^  leaky_relu /,/devices:/s/.*devices: //p' "$tmp/list"
}
if PIPEHOST_PLUGIN_PATH= "$bin" --list-plugins --plugin-dir "$tmp/plugin" --plugin-dir "$pdir" >"$tmp/list" 2>&1 &&
	grep -q "leaky_relu" "$tmp/list" && grep -q "slope" "$tmp/list"; then
	ok "--list-plugins shows the third-party layer and its option"
else
	not_ok "--list-plugins: $(head -5 "$tmp/list")"
fi
sed 's/^type = relu$/type = leaky_relu/' "$fixtures/tiny.ini" >"$tmp/leaky.ini"
# train NAME ARGS...: tiny.ini with leaky_relu, 5 steps, every loss logged
# ($count: more environment for pipehost, unquoted)
count=
train() {
	name=$1
	shift
	# shellcheck disable=SC2086
	PIPEHOST_PLUGIN_PATH= env $count "$bin" -c "$tmp/leaky.ini" --set run.steps=5 --set run.log_every=1 \
		--set "run.metrics=$tmp/$name.jsonl" "$@" >"$tmp/$name.out" 2>&1 && grep -q "trained 5 steps" "$tmp/$name.out"
}
last_loss() {
	grep '"step"' "$tmp/$1.jsonl" | tail -1 | sed -n 's/.*"loss":\([^,}]*\).*/\1/p'
}
if train cpu --plugin-dir "$tmp/plugin" --plugin-dir "$pdir"; then
	ok "the installed pipehost trains with the out-of-tree layer"
else
	not_ok "training with leaky_relu: $(tail -3 "$tmp/cpu.out")"
fi

# A plugin of the previous minor (ABI 1.3: no `cuda` field) loads and trains.
mkdir -p "$tmp/abi13" && cp "$TEST_PLUGIN_DIR/abi13_relu.so" "$tmp/abi13/"
sed 's/^type = relu$/type = relu_abi13/' "$fixtures/tiny.ini" >"$tmp/abi13.ini"
if PIPEHOST_PLUGIN_PATH= "$bin" -c "$tmp/abi13.ini" --set run.steps=5 --plugin-dir "$tmp/abi13" --plugin-dir "$pdir" \
	>"$tmp/abi13.out" 2>&1 && grep -q "trained 5 steps" "$tmp/abi13.out"; then
	ok "a layer plugin of ABI 1.3 (its struct ends before cuda) still loads and trains"
else
	not_ok "ABI 1.3 layer: $(tail -3 "$tmp/abi13.out")"
fi

# The same source without a CUDA compiler: the weak reference to the twin's
# hooks is NULL and the layer is CPU-only.
if build_plugin "$tmp/cpuonly" NVCC= && [ "$(devices_of "$tmp/cpuonly")" = "cpu" ]; then
	ok "built without nvcc, the same leaky_relu.c is a CPU-only layer"
else
	not_ok "CPU-only build: $(tail -3 "$tmp/cpuonly.log") devices '$(devices_of "$tmp/cpuonly")'"
fi
if [ -z "$cuda" ]; then
	echo "# SKIP the CUDA twin: no nvcc at /usr/local/cuda/bin/nvcc and not an emulator build"
	finish; exit
fi
if [ "$(devices_of "$tmp/plugin")" = "cpu, cuda" ]; then
	ok "with its CUDA twin linked in, leaky_relu runs on cpu and cuda"
else
	not_ok "devices of the twin build: '$(devices_of "$tmp/plugin")'"
fi
if [ "$cuda" != emulator ]; then
	echo "# SKIP training on a GPU: the CUDA build has no GPU to run on here (the emulator build does)"
	finish; exit
fi
gpu="--set run.stages=1 --set run.devices=cuda:0"
# the emulator counts each kernel's launches (on stderr at exit): the
# twin's kernel must be among them, not the CPU code on device pointers
count=PH_CUEMU_LAUNCHES=1
# shellcheck disable=SC2086
if train gpu $gpu --plugin-dir "$tmp/plugin" --plugin-dir "$pdir" &&
	grep -q 'cuemu: *[1-9][0-9]*  leaky_kernel$' "$tmp/gpu.out" &&
	train cpu1 --set run.stages=1 --plugin-dir "$tmp/plugin" --plugin-dir "$pdir" &&
	awk -v a="$(last_loss gpu)" -v b="$(last_loss cpu1)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-3 * (b < 0 ? -b : b)) }'; then
	ok "on the emulated GPU the twin's kernel runs ($(grep 'leaky_kernel$' "$tmp/gpu.out" | sed 's/^cuemu: *//; s/  .*//') launches) and trains to the CPU's loss ($(last_loss gpu) vs $(last_loss cpu1))"
else
	not_ok "training on cuda:0: $(tail -3 "$tmp/gpu.out") loss $(last_loss gpu) vs $(last_loss cpu1)"
fi
count=
# shellcheck disable=SC2086
if ! train nocuda $gpu --plugin-dir "$tmp/cpuonly" --plugin-dir "$pdir" &&
	grep -q "layer relu1 (leaky_relu) has no CUDA implementation" "$tmp/nocuda.out"; then
	ok "the CPU-only build is refused on a GPU: $(grep 'no CUDA' "$tmp/nocuda.out")"
else
	not_ok "CPU-only leaky_relu on cuda:0: $(tail -3 "$tmp/nocuda.out")"
fi
finish
