#!/bin/sh
# SPDX-License-Identifier: MIT
# A fresh `make install` into a staging directory gives a user everything:
# the man page (man shows it, with every option of --help and every section
# of --list-options), the bash completion, every example job (each runs from
# the installed tree, 2 steps), and the three plugin templates, which build
# from the installed tree with pkg-config alone, load, and pass
# --check-plugin (under umask 002), train their run.ini, and install where
# runs find them by name.
. "$top_srcdir/tests/lib.sh"
dest="$tmp/dest"
# a nested make of the same tree: not the outer make's job server
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top_builddir" install DESTDIR="$dest" >"$tmp/install.log" 2>&1; then
	ok "make install DESTDIR=..."
else
	not_ok "make install: $(tail -3 "$tmp/install.log")"
	finish
	exit
fi
pc=$(find "$dest" -name pipehost.pc | head -1)
prefix=$(pkg-config --variable=prefix "$pc")
inst="$dest$prefix"
bin="$inst/bin/pipehost"
plugins="$dest$(pkg-config --variable=plugindir "$pc")"
# the installed pipehost, with the installed plugins only (the tests'
# environment points PIPEHOST_PLUGIN_PATH into the build tree)
ipipehost() { PIPEHOST_PLUGIN_PATH= "$bin" "$@"; }

# The man page.
page=$(find "$dest" -path '*/man1/pipehost.1' | head -1)
if [ -z "$page" ]; then
	not_ok "no man1/pipehost.1 installed"
elif ! command -v man >/dev/null 2>&1; then
	ok "# SKIP man is not installed (Debian: man-db)"
elif ! printf '.TH PROBE 1\n.SH NAME\nprobe \\- renders\n' >"$tmp/probe.1" ||
	! MANWIDTH=80 man -l "$tmp/probe.1" 2>/dev/null | grep -q 'probe - renders'; then
	# a minimized image's man (Ubuntu's stub) or one without groff renders
	# no page at all: nothing to learn about ours
	ok "# SKIP man cannot render a page here (a minimized system, or no groff)"
else
	if MANWIDTH=250 man -l "$page" >"$tmp/man" 2>"$tmp/man.err" && grep -q "pipehost --check-plugin FILE.so" "$tmp/man"; then
		ok "man -l shows the installed page ($(wc -l <"$tmp/man") lines)"
	else
		not_ok "man -l $page: $(head -3 "$tmp/man.err")"
	fi
	missing=
	for opt in $("$bin" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
		grep -q -- "$opt" "$tmp/man" || missing="$missing $opt"
	done
	for sec in $("$bin" --list-options | sed -n 's/^\[\(.*\)\]$/\1/p' | tr ' ' '_'); do
		grep -q -- "^ *\[$(echo "$sec" | tr '_' ' ')\]" "$tmp/man" || missing="$missing [$sec]"
	done
	for key in $("$bin" --list-options | sed -n 's/^  \([a-z_0-9]*\) .*/\1/p' | sort -u); do
		grep -Eq "^ +$key( |$)" "$tmp/man" || missing="$missing $key"
	done
	[ -z "$missing" ] && ok "the page has every option of --help, every section and key of --list-options" ||
		not_ok "the man page lacks:$missing"
	# each data source as a value of source (they once read as keys named
	# "source =,"), and the exit statuses of docs/conventions.md
	missing=
	for src in $("$bin" --list-options | sed -n 's/^  source = \([a-z-]*\) .*/\1/p'); do
		grep -Eq "^ +source = $src$" "$tmp/man" || missing="$missing source=$src"
	done
	grep -q "source =," "$tmp/man" && missing="$missing (a garbled 'source =,')"
	for st in 0 1 2 "130, 143"; do
		awk '/^EXIT STATUS/ { on = 1 } on' "$tmp/man" | grep -Eq "^ +$st( |$)" || missing="$missing exit-$st"
	done
	[ -z "$missing" ] && ok "the page lists every data source and the exit statuses 0, 1, 2, 130, 143" ||
		not_ok "the man page lacks:$missing"
fi

# The bash completion.
comp=$(find "$dest" -path '*/bash-completion/completions/pipehost' | head -1)
[ -n "$comp" ] && bash -n "$comp" && ok "bash completion installed (${comp#"$dest"})" ||
	not_ok "no bash-completion/completions/pipehost under $dest"

# Every example of the source tree is installed, and runs as installed.
for src in "$top_srcdir"/etc/*.ini; do
	name=$(basename "$src")
	ex="$inst/share/pipehost/examples/$name"
	if [ ! -f "$ex" ]; then
		not_ok "example $name not installed"
		continue
	fi
	# the data it reads must be there (Debian's dataset-fashion-mnist, fortunes)
	need=$(sed -n 's/^path *= *\([^ ;]*\).*/\1/p' "$ex")
	case $(sed -n 's/^source *= *\([^ ;]*\).*/\1/p' "$ex") in
	text) need=${need:-/usr/share/games/fortunes} ;;
	fashion-mnist) need=${need:-/usr/share/datasets/fashion-mnist} ;;
	esac
	if [ -n "$need" ] && [ ! -e "$need" ]; then
		ok "# SKIP example $name: its data $need is not installed"
		continue
	fi
	# 2 steps of one sample a micro-batch: the test stays fast
	# (micro-batches times replicas samples)
	mb=$(sed -n 's/^micro_batches *= *\([0-9]*\).*/\1/p' "$ex")
	rep=$(sed -n 's/^replicas *= *\([0-9]*\).*/\1/p' "$ex")
	[ "${rep:-0}" -gt 0 ] || rep=1
	if (cd "$tmp" && ipipehost -c "$ex" --plugin-dir "$plugins" --set run.steps=2 --set run.eval=no \
		--set "run.batch=$(( ${mb:-4} * rep ))") \
		>"$tmp/ex.log" 2>&1 && grep -q "trained 2 steps" "$tmp/ex.log"; then
		ok "example $name runs from the installed tree: $(grep 'trained 2 steps' "$tmp/ex.log")"
	else
		not_ok "example $name: $(tail -3 "$tmp/ex.log")"
	fi
done

# The templates: copied out, built with pkg-config alone, tested, loaded,
# checked, their run.ini trained, installed where runs find them by name.
# All under umask 002 (many distributions' default), where the linker's
# group-writable .so was refused by --check-plugin until the Makefiles
# dropped the bit themselves.
export PKG_CONFIG_PATH="$(dirname "$pc")"
# pkg-config's prefix moved to the staging directory; the Makefiles find the
# headers and pipehost (bindir) through it
tmake() { (umask 002 && PIPEHOST_PLUGIN_PATH= make "$@" PKG_CONFIG="pkg-config --define-variable=prefix=$inst"); }
for kind in layer:scale:layers schedule:windowed:schedules partitioner:greedy:partitioners; do
	k=${kind%%:*} rest=${kind#*:}
	name=${rest%%:*} list=${rest#*:}
	src="$inst/share/pipehost/templates/$k"
	if [ ! -f "$src/Makefile" ] || [ ! -f "$src/run.ini" ]; then
		not_ok "template $k not installed (or its run.ini)"
		continue
	fi
	(umask 002 && cp -r "$src" "$tmp/$k" && chmod -R u+w "$tmp/$k")
	if tmake -C "$tmp/$k" check >"$tmp/$k.log" 2>&1; then
		ok "template $k under umask 002 builds with pkg-config alone, passes its test and --check-plugin: $(grep '^ok' "$tmp/$k.log")"
	else
		not_ok "template $k: make check: $(grep -E 'FAIL|rror' "$tmp/$k.log" | head -3) $(tail -2 "$tmp/$k.log")"
	fi
	if ipipehost --list-plugins --plugin-dir "$tmp/$k" --plugin-dir "$plugins" >"$tmp/list" 2>&1 &&
		awk -v kind="$list:" -v n="$name" '/^[^ ]/ { on = ($1 == kind) } on && $1 == n { found = 1 } END { exit !found }' \
			"$tmp/list"; then
		ok "pipehost --list-plugins --plugin-dir lists the $k template's $name"
	else
		not_ok "--list-plugins with the $k template: $(head -3 "$tmp/list")"
	fi
	# the docs' step: pipehost -c run.ini --plugin-dir . (the shipped
	# plugins, staged, are not in the compiled-in directory: named too)
	if (cd "$tmp/$k" && ipipehost -c run.ini --plugin-dir . --plugin-dir "$plugins") >"$tmp/run.log" 2>&1 &&
		grep -q "^trained [0-9]* steps" "$tmp/run.log"; then
		ok "template $k: its run.ini trains with --plugin-dir .: $(grep '^trained' "$tmp/run.log")"
	else
		not_ok "template $k: pipehost -c run.ini --plugin-dir .: $(tail -3 "$tmp/run.log")"
	fi
	# make install DESTDIR=: into the staged plugin directory, where a run
	# finds it by name with no --plugin-dir ($PIPEHOST_PLUGIN_PATH stands in
	# for the compiled-in directory, which DESTDIR moved); make uninstall
	# takes it out, before pipehost's own uninstall below
	so="$plugins/$name.so"
	if (umask 002 && PIPEHOST_PLUGIN_PATH= make -C "$tmp/$k" install DESTDIR="$dest") >"$tmp/inst.log" 2>&1 &&
		[ "$(stat -c %a "$so")" = 755 ] &&
		(cd "$tmp" && PIPEHOST_PLUGIN_PATH="$plugins" "$bin" -c "$tmp/$k/run.ini") >"$tmp/run.log" 2>&1 &&
		grep -q "^trained [0-9]* steps" "$tmp/run.log"; then
		ok "template $k: make install DESTDIR=... puts $name.so (755) where a run without --plugin-dir finds it"
	else
		not_ok "template $k: make install: $(tail -2 "$tmp/inst.log") $(ls -l "$so" 2>&1) $(tail -2 "$tmp/run.log")"
	fi
	if make -C "$tmp/$k" uninstall DESTDIR="$dest" >"$tmp/inst.log" 2>&1 && [ ! -e "$so" ]; then
		ok "template $k: make uninstall DESTDIR=... removes $name.so"
	else
		not_ok "template $k: make uninstall: $(tail -2 "$tmp/inst.log") $(ls -l "$so" 2>&1)"
	fi
done

# The layer template's test tells += from = : a backward that zeroes the
# gradients it should add to, or adds to the dx it should overwrite, passed
# it while the gradients started at 0 and dx in fresh (zeroed) memory.
for bug in 's/dgain\[i\] += dy\[k\] \* x\[k\];/dgain[i] = (b ? dgain[i] : 0) + dy[k] * x[k];/:= where += is due' \
	's/dx\[k\] = dy\[k\] \* gain\[i\];/dx[k] += dy[k] * gain[i];/:+= where = is due'; do
	what=${bug##*:}
	rm -rf "$tmp/broken" && cp -r "$tmp/layer" "$tmp/broken"
	sed -i "${bug%:*}" "$tmp/broken/scale.c"
	if cmp -s "$tmp/layer/scale.c" "$tmp/broken/scale.c"; then
		not_ok "the sed that breaks scale.c ($what) no longer matches it"
	elif tmake -C "$tmp/broken" -B scale.so test-scale >"$tmp/broken.log" 2>&1 &&
		! (cd "$tmp/broken" && ./test-scale ./scale.so) >"$tmp/broken.log" 2>&1 && grep -q '^FAIL' "$tmp/broken.log"; then
		ok "test-scale fails a backward with $what: $(cat "$tmp/broken.log")"
	else
		not_ok "test-scale with $what: $(tail -2 "$tmp/broken.log")"
	fi
done

# make uninstall takes it all back: no file, and none of pipehost's own
# directories (automake's uninstall left them, empty: 2026-12-07)
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$top_builddir" uninstall DESTDIR="$dest" >"$tmp/uninstall.log" 2>&1 &&
	[ -z "$(find "$dest" -type f -o -type l)" ] && [ -z "$(find "$dest" -type d -name pipehost)" ]; then
	ok "make uninstall: no file and no pipehost directory left"
else
	not_ok "make uninstall left: $(find "$dest" \( -type f -o -type l -o -name pipehost \) | head -5) $(tail -2 "$tmp/uninstall.log")"
fi
finish
