#!/bin/sh
# A third party builds a layer against the installed header (pkg-config) and
# the installed pipehost trains with it.
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
cp -r "$top_srcdir/tests/example-plugin" "$tmp/plugin"
chmod -R u+w "$tmp/plugin"
export PKG_CONFIG_PATH="$(dirname "$pc")"
if make -s -C "$tmp/plugin" PKG_CONFIG="pkg-config --define-variable=prefix=$inst" >"$tmp/build.log" 2>&1 &&
	[ -f "$tmp/plugin/leaky_relu.so" ]; then
	ok "example plugin builds out of tree with pkg-config --cflags pipehost"
else
	not_ok "example plugin build: $(tail -3 "$tmp/build.log")"
fi
bin="$inst/bin/pipehost"
pdir="$(dirname "$(find "$dest" -name linear.so | head -1)")"
if PIPEHOST_PLUGIN_PATH= "$bin" --list-plugins --plugin-dir "$tmp/plugin" --plugin-dir "$pdir" >"$tmp/list" 2>&1 &&
	grep -q "leaky_relu" "$tmp/list" && grep -q "slope" "$tmp/list"; then
	ok "--list-plugins shows the third-party layer and its option"
else
	not_ok "--list-plugins: $(head -5 "$tmp/list")"
fi
sed 's/^type = relu$/type = leaky_relu/' "$fixtures/tiny.ini" >"$tmp/leaky.ini"
if PIPEHOST_PLUGIN_PATH= "$bin" -c "$tmp/leaky.ini" --plugin-dir "$tmp/plugin" --plugin-dir "$pdir" \
	--set run.steps=5 >"$tmp/run" 2>&1 && grep -q "trained 5 steps" "$tmp/run"; then
	ok "the installed pipehost trains with the out-of-tree layer"
else
	not_ok "training with leaky_relu: $(tail -3 "$tmp/run")"
fi
finish
