#!/bin/sh
# SPDX-License-Identifier: MIT
# spdx.sh [--check] [FILE...]: give every source file the project's license
# tag, `SPDX-License-Identifier: MIT`, as its first comment line (after a
# #! line and a Python coding line, which must stay first).  Idempotent: a
# file that has the tag in its first 5 lines is left alone.
#
#   --check   change nothing; list the files without the tag and exit 1 if
#             there are any
#
# Without FILE arguments it walks the source tree this script sits in: the
# files git tracks or would (not ignored), or (in an unpacked tarball, which has no .git) every
# file under it less what configure, make and libtool write.  Only these
# kinds are tagged: .c .h .cu .cuh .cc .sh .py .am .ac .mk
set -eu

check=0
if [ "${1:-}" = "--check" ]; then
	check=1
	shift
fi
case "${1:-}" in
-*) echo "spdx.sh: unknown option $1; usage: spdx.sh [--check] [FILE...]" >&2; exit 2 ;;
esac

tag='SPDX-License-Identifier: MIT'
root=$(cd "$(dirname "$0")/.." && pwd -P)

# The source files, one a line, relative to $root.
list_sources() {
	# git's list only where root is a work tree's top: an unpacked tarball
	# inside a clone (make distcheck's) is no part of that clone's list
	if [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
		git -C "$root" ls-files --cached --others --exclude-standard
	else
		(cd "$root" && find . \( -name .git -o -name build-aux -o -name m4 -o -name autom4te.cache \
			-o -name .deps -o -name .libs -o -name 'ci-*' -o -name '_build' \) -prune -o -type f -print |
			sed 's|^\./||' | grep -v -x -e build-config.h)
	fi | grep -E '\.(c|h|cu|cuh|cc|sh|py|am|ac|mk)$'
}

# The comment that carries the tag in FILE's language.
comment_for() {
	case "$1" in
	*.c | *.h | *.cu | *.cuh | *.cc) echo "/* $tag */" ;;
	*.ac) echo "dnl $tag" ;; # m4: a '#' line before AC_INIT would land above configure's #!
	*) echo "# $tag" ;;
	esac
}

has_tag() {
	head -n 5 "$1" | grep -q "$tag"
}

# Insert the tag into FILE: after a #! line, and after a Python coding
# line that follows it, else at the top.  Written beside the file, then
# moved over it, so an interrupted run never leaves half a file.
add_tag() {
	file=$1
	line=$(comment_for "$file")
	skip=0
	first=$(head -n 1 "$file")
	case "$first" in '#!'*) skip=1 ;; esac
	if [ "$skip" = 1 ] && sed -n 2p "$file" | grep -Eq '^#.*coding[:=]'; then
		skip=2
	fi
	new="$file.spdx-tmp"
	{
		[ "$skip" -gt 0 ] && head -n "$skip" "$file"
		printf '%s\n' "$line"
		tail -n +"$((skip + 1))" "$file"
	} >"$new"
	chmod "$(stat -c %a "$file")" "$new"
	mv -f "$new" "$file"
}

missing=0
process() {
	f=$1
	[ -f "$f" ] || { echo "spdx.sh: $f: no such file" >&2; exit 2; }
	has_tag "$f" && return 0
	if [ "$check" = 1 ]; then
		echo "$f"
		missing=$((missing + 1))
	else
		add_tag "$f"
		echo "tagged $f"
	fi
}

if [ $# -gt 0 ]; then
	for f in "$@"; do process "$f"; done
else
	tmp=$(mktemp)
	trap 'rm -f "$tmp"' EXIT
	list_sources >"$tmp"
	cd "$root"
	while IFS= read -r f; do process "$f"; done <"$tmp"
fi

if [ "$check" = 1 ] && [ "$missing" -gt 0 ]; then
	echo "spdx.sh: $missing file(s) above lack '$tag'; run scripts/spdx.sh to add it" >&2
	exit 1
fi
exit 0
