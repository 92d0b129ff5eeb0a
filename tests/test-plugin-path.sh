#!/bin/sh
# SPDX-License-Identifier: MIT
# The plugin path: a --plugin-dir that does not exist is refused in one
# line; "none found" lists the directories searched; and the directory
# compiled in follows the configured prefix (build-config.h, configure.ac).
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

expect_error "--plugin-dir that does not exist" "^pipehost: --plugin-dir $tmp/none: no such directory; give a directory that holds plugins \(.so files\)$" \
	--plugin-dir "$tmp/none" --list-plugins
expect_error "--plugin-dir that is a file" "^pipehost: --plugin-dir $tiny: not a directory" --plugin-dir "$tiny" -c "$tiny"

# None found: every directory searched is named, the missing marked.  Only
# where the compiled-in directory holds no plugins (else they are found).
compiled=$("$PIPEHOST" --help | sed -n 's/^plugins are searched in .* and //p')
if ls "$compiled"/*.so >/dev/null 2>&1; then
	ok "# SKIP none found: $compiled holds plugins"
else
	# short names: the line has 255 characters at most (ph_err), the
	# compiled-in directory last
	mkdir -p "$tmp/e" "$tmp/a"
	cp "$tiny" "$tmp/t.ini"
	PIPEHOST_PLUGIN_PATH="$tmp/a:$tmp/g" expect_error "none found names the directories searched" \
		"unknown partitioner plugin 'uniform'; found: none in $tmp/e, $tmp/a, $tmp/g \(missing\), $compiled" \
		-c "$tmp/t.ini" --plugin-dir "$tmp/e"
fi

# A plugin directory whose path is over 1,200 bytes: its plugins load (a
# 1,024-byte buffer once cut their paths, and the load named a file that
# does not exist).
long=$tmp
for i in 1 2 3 4 5 6; do long="$long/$(printf '%0200d' "$i")"; done
mkdir -p "$long" && cp "$PH_LAYER_DIR/relu.so" "$long/"
if PIPEHOST_PLUGIN_PATH="$long" "$PIPEHOST" --list-plugins >"$tmp/out" 2>"$tmp/err" &&
	grep -q "from $long/relu.so$" "$tmp/out"; then
	ok "a plugin directory of ${#long} bytes: relu.so loads from it"
else
	not_ok "plugin directory of ${#long} bytes: $(head -c 300 "$tmp/err")"
fi

# The compiled-in directories are the configured prefix's, and follow it:
# they live in build-config.h, which config.status rewrites when configure
# runs with another --prefix, and pipehost is rebuilt from it (a dry run,
# make -n, with build-config.h taken as new shows it without touching the
# build tree).
plugindir=$(pkg-config --variable=plugindir "$top_builddir/pipehost.pc")
if [ "$compiled" = "$plugindir" ] && grep -q "^#define PH_PLUGIN_DIR \"$plugindir\"$" "$top_builddir/build-config.h" &&
	grep -q "^#define PH_BACKEND_DIR \"$plugindir/backends\"$" "$top_builddir/build-config.h"; then
	ok "pipehost searches $plugindir, pipehost.pc's plugindir, from build-config.h"
else
	not_ok "pipehost searches '$compiled'; pipehost.pc says '$plugindir'; build-config.h: $(grep PH_PLUGIN_DIR "$top_builddir/build-config.h")"
fi
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -n -W build-config.h -C "$top_builddir" core/pipehost >"$tmp/dry" 2>&1 &&
	grep -q 'main\.c' "$tmp/dry" && grep -q 'device\.c' "$tmp/dry" && grep -Eq -- '-o core/pipehost( |$)' "$tmp/dry"; then
	ok "a new build-config.h (a new prefix) recompiles main.c and device.c and relinks pipehost"
else
	not_ok "make -n -W build-config.h core/pipehost: $(grep -c . "$tmp/dry") lines: $(head -c 600 "$tmp/dry")"
fi

# With -c, --list-plugins lists what the INI's plugin_path adds (here the
# test plugins' ep_linear) and --list-options the core keys, and either
# stops there: neither once went on to train the INI's model.
mkdir -p "$tmp/pp" && cp "$TEST_PLUGIN_DIR/ep-linear.so" "$tmp/pp/" # the directory's other plugins are bad on purpose
printf '[run]\nplugin_path = %s\n' "$tmp/pp" >"$tmp/pp.ini"
sed 1d "$tiny" | sed '/^\[run\]$/d' >>"$tmp/pp.ini"
if "$PIPEHOST" -c "$tmp/pp.ini" --list-plugins >"$tmp/out" 2>"$tmp/err" && grep -q '^  ep_linear ' "$tmp/out" &&
	! grep -q '^plan:\|^trained' "$tmp/out"; then
	ok "-c INI --list-plugins lists the INI's plugin_path and trains nothing"
else
	not_ok "-c INI --list-plugins: $(grep -c '^trained' "$tmp/out") trained line(s), ep_linear listed: $(grep -c ep_linear "$tmp/out"); $(head -c 300 "$tmp/err")"
fi
if "$PIPEHOST" -c "$tiny" --list-options >"$tmp/out" 2>"$tmp/err" && grep -q '^\[run\]$' "$tmp/out" &&
	! grep -q '^plan:\|^trained' "$tmp/out"; then
	ok "-c INI --list-options lists the keys and trains nothing"
else
	not_ok "-c INI --list-options: $(head -c 300 "$tmp/out") $(head -c 300 "$tmp/err")"
fi
finish
