#!/bin/sh
# scripts/spdx.sh: adds `SPDX-License-Identifier: MIT` as each source
# file's first comment line (after a #! line), once; --check lists the files
# without it and fails.  Run on copies, never on the tree itself.
. "$top_srcdir/tests/lib.sh"
spdx="$top_srcdir/scripts/spdx.sh"
tag='SPDX-License-Identifier: MIT'
d="$tmp/files"
mkdir -p "$d"
printf '#!/bin/sh\necho hi\n' >"$d/run.sh"
chmod 755 "$d/run.sh"
printf 'int x;\n' >"$d/a.c"
printf '#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\n"""doc"""\n' >"$d/b.py"
printf 'AC_INIT([x], [1])\n' >"$d/configure.ac"
printf '/* SPDX-License-Identifier: MIT */\nint y;\n' >"$d/tagged.h"
cp "$d/tagged.h" "$tmp/tagged.before"

if sh "$spdx" --check "$d"/run.sh "$d"/a.c "$d"/b.py "$d"/configure.ac "$d"/tagged.h >"$tmp/out" 2>"$tmp/err"; then
	not_ok "--check passed on untagged files"
elif [ "$(wc -l <"$tmp/out")" -eq 4 ] && ! grep -q tagged.h "$tmp/out"; then
	ok "--check lists the 4 untagged files and fails: $(cat "$tmp/err")"
else
	not_ok "--check: $(cat "$tmp/out" "$tmp/err")"
fi
sh "$spdx" "$d"/run.sh "$d"/a.c "$d"/b.py "$d"/configure.ac "$d"/tagged.h >/dev/null
first2=$(head -n 2 "$d/run.sh" | tr '\n' '|')
[ "$first2" = "#!/bin/sh|# $tag|" ] && ok "shell: the #! line stays first" || not_ok "run.sh begins $first2"
[ -x "$d/run.sh" ] && ok "its mode stays" || not_ok "run.sh lost its x bit"
[ "$(head -n 1 "$d/a.c")" = "/* $tag */" ] && ok "C: a comment at the top" || not_ok "a.c: $(head -n 1 "$d/a.c")"
[ "$(sed -n 3p "$d/b.py")" = "# $tag" ] && ok "Python: after #! and the coding line" || not_ok "b.py: $(cat "$d/b.py")"
[ "$(head -n 1 "$d/configure.ac")" = "dnl $tag" ] && ok "configure.ac: an m4 comment (dnl)" || not_ok "configure.ac: $(head -n 1 "$d/configure.ac")"
cmp -s "$d/tagged.h" "$tmp/tagged.before" && ok "a tagged file is untouched" || not_ok "tagged.h changed"
cat "$d"/* >"$tmp/once"
sh "$spdx" "$d"/run.sh "$d"/a.c "$d"/b.py "$d"/configure.ac >/dev/null
cat "$d"/* >"$tmp/twice"
cmp -s "$tmp/once" "$tmp/twice" && ok "a second run changes nothing" || not_ok "a second run changed files"
sh "$spdx" --check "$d"/run.sh "$d"/a.c "$d"/b.py "$d"/configure.ac && ok "--check passes once tagged" || not_ok "--check after tagging"

# A tree without .git (an unpacked tarball): its sources, not what
# configure and libtool add (build-aux/ltmain.sh is libtool's, not ours).
t="$tmp/tree"
mkdir -p "$t/scripts" "$t/core" "$t/build-aux" "$t/core/.libs"
cp "$spdx" "$t/scripts/"
printf 'int z;\n' >"$t/core/z.c"
printf '# x\n' >"$t/core/local.mk"
printf '#!/bin/sh\n' >"$t/build-aux/ltmain.sh"
printf '#define X 1\n' >"$t/build-config.h"
printf 'not source\n' >"$t/README.md"
if ( cd "$tmp" && sh "$t/scripts/spdx.sh" --check ) >"$tmp/out" 2>/dev/null; then
	not_ok "--check on the tree passed"
else
	sort "$tmp/out" >"$tmp/listed"
	printf 'core/local.mk\ncore/z.c\n' >"$tmp/want"
	cmp -s "$tmp/listed" "$tmp/want" && ok "a tree without .git: its sources listed, configure's and libtool's files left alone" ||
		not_ok "tree listed: $(cat "$tmp/listed")"
fi
# this tree itself: every source carries the tag (a new file without it
# fails here; scripts/spdx.sh adds it)
if sh "$spdx" --check >"$tmp/own-tree.out" 2>&1; then
	ok "every source file of this tree carries '$tag'"
else
	not_ok "files without the tag: $(head -c 600 "$tmp/own-tree.out")"
fi
finish
