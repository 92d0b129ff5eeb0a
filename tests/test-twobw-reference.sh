#!/bin/sh
# SPDX-License-Identifier: MIT
# schedule = 2bw against an independent implementation of the delayed
# update in NumPy (tests/reference/twobw_reference.py); skips without
# Python or NumPy.  Set PH_REFERENCE_PYTHON (as the other reference tests
# read) or PYTHON to choose the interpreter.
. "$top_srcdir/tests/lib.sh"
# the first of $PH_REFERENCE_PYTHON, $PYTHON, python3 and the system's python3 (where apt puts
# python3-numpy, which a python3 earlier in PATH may not see) with NumPy
py=
for c in ${PH_REFERENCE_PYTHON:-} ${PYTHON:-} python3 /usr/bin/python3; do
	if "$c" -c 'import numpy' 2>/dev/null; then
		py=$c
		break
	fi
done
if [ -z "$py" ]; then
	echo "SKIP: no Python with NumPy (${PH_REFERENCE_PYTHON:-${PYTHON:-python3}}, /usr/bin/python3)"
	exit 77
fi
"$py" "$top_srcdir/tests/reference/twobw_reference.py" "$PIPEHOST" "$tmp"
