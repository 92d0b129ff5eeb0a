#!/bin/sh
# SPDX-License-Identifier: MIT
# schedule = 2bw against an independent implementation of the delayed
# update in NumPy (tests/reference/twobw_reference.py); skips without
# Python or NumPy.  Set PYTHON to choose the interpreter.
. "$top_srcdir/tests/lib.sh"
py=${PYTHON:-python3}
if ! "$py" -c 'import numpy' 2>/dev/null; then
	echo "SKIP: no Python with NumPy ($py)"
	exit 77
fi
"$py" "$top_srcdir/tests/reference/twobw_reference.py" "$PIPEHOST" "$tmp"
