#!/bin/sh
# SPDX-License-Identifier: MIT
# The core INI sections come from one table (core/config.c): --list-options
# shows every section the parser accepts and names in its unknown-section
# error, the INI reference script prints them all, and the [gpu] keys reach
# their PIPEHOST_* variables before any plugin loads, winning over the
# environment, which stays the fallback.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

"$PIPEHOST" --list-options >"$tmp/list" 2>&1
listed=$(sed -n 's/^\[\(.*\)\]$/\1/p' "$tmp/list" | tr '\n' ',' | sed 's/,$//')
printf '[trainer]\n' >"$tmp/sec.ini"
"$PIPEHOST" -c "$tmp/sec.ini" 2>"$tmp/err" >/dev/null
named=$(sed -n 's/.*; sections are //p' "$tmp/err" | sed 's/ and /, /; s/\[//g; s/\]//g; s/, /,/g')
want="run,data,optimizer,partition,schedule,checkpoint,gpu,layer NAME"
if [ "$listed" = "$want" ] && [ "$named" = "$want" ]; then
	ok "--list-options and the unknown-section error name the same sections: $listed"
else
	not_ok "sections: --list-options '$listed', error '$named', want '$want'"
fi

# Every listed section (but the layers') takes its first listed key at its
# listed default.
for sec in $(echo "$listed" | tr ',' ' '); do
	[ "$sec" = layer ] || [ "$sec" = NAME ] && continue
	kv=$(sed -n "/^\[$sec\]\$/{n;p;}" "$tmp/list" | awk '{ d = $4; if (d == "\"\"") d = ""; print $1 "=" d }')
	if "$PIPEHOST" -c "$tiny" --plan --set "$sec.$kv" >"$tmp/out" 2>"$tmp/err"; then
		ok "[$sec] is parsed: --set $sec.$kv"
	else
		not_ok "[$sec] --set $sec.$kv: $(head -c 300 "$tmp/err")"
	fi
done

PIPEHOST="$PIPEHOST" sh "$top_srcdir/scripts/ini-reference.sh" >"$tmp/ref" 2>&1
missing=""
for sec in run data optimizer partition schedule checkpoint gpu "layer NAME"; do
	grep -qxF "[$sec]" "$tmp/ref" || missing="$missing [$sec]"
done
if [ -z "$missing" ]; then
	ok "scripts/ini-reference.sh lists every core section"
else
	not_ok "scripts/ini-reference.sh lacks$missing"
fi

if "$PIPEHOST" --help | grep -q -- '--list-options .*every core section'; then
	ok "--help says --list-options shows every core section"
else
	not_ok "--help: $("$PIPEHOST" --help | grep -- --list-options)"
fi

# Every [gpu] key's help names the variable it sets.
bad=$(sed -n '/^\[gpu\]$/,/^\[/p' "$tmp/list" | grep '^  ' | while read -r key rest; do
	var=PIPEHOST_$(echo "$key" | tr 'a-z' 'A-Z')
	echo "$rest" | grep -qF "\$$var" || echo "$key"
done)
if [ -z "$bad" ] && [ "$(sed -n '/^\[gpu\]$/,/^\[/p' "$tmp/list" | grep -c '^  ')" -eq 7 ]; then
	ok "[gpu]: 7 keys, each naming its PIPEHOST_ variable"
else
	not_ok "[gpu] keys whose help lacks their variable: $bad"
fi

# probe ARGS...: the [gpu] variables as a plugin sees them when it loads
probe() {
	rm -f "$tmp/probe"
	PH_ENV_PROBE="$tmp/probe" "$PIPEHOST" -c "$tmp/gpu.ini" --plan --plugin-dir "$top_builddir/tests/plugins/probe/.libs" \
		"$@" >"$tmp/out" 2>"$tmp/err" || echo "pipehost failed: $(head -c 300 "$tmp/err")" >>"$tmp/probe"
}
expect_probe() {
	if grep -qxF "$2" "$tmp/probe"; then
		ok "$1: $2"
	else
		not_ok "$1: want $2, the plugin saw: $(tr '\n' ' ' <"$tmp/probe" 2>/dev/null)"
	fi
}
{ cat "$tiny"; printf '[gpu]\nln_warp = on\ngelu_fuse = off\n'; } >"$tmp/gpu.ini"
unset PIPEHOST_GEMM_CAST PIPEHOST_LN_WARP PIPEHOST_OPTIM_MANY PIPEHOST_GELU_FUSE PIPEHOST_GEMM_LT
probe --set gpu.gemm_cast=off
expect_probe "--set gpu.gemm_cast=off" "PIPEHOST_GEMM_CAST=0"
expect_probe "[gpu] gelu_fuse = off" "PIPEHOST_GELU_FUSE=0"
expect_probe "[gpu] ln_warp = on" "PIPEHOST_LN_WARP=1"
expect_probe "auto, no variable" "PIPEHOST_GEMM_LT=(unset)"
PIPEHOST_LN_WARP=0 PIPEHOST_OPTIM_MANY=0 PIPEHOST_GEMM_LT=0 probe --set gpu.gemm_lt=on
expect_probe "the INI key wins over the environment" "PIPEHOST_LN_WARP=1"
expect_probe "--set wins over the environment" "PIPEHOST_GEMM_LT=1"
expect_probe "auto keeps the environment's" "PIPEHOST_OPTIM_MANY=0"

printf '[gpu]\nln_warp = fast\n' >"$tmp/bad.ini"
expect_error "bad [gpu] value" "$tmp/bad.ini:2: \[gpu\] ln_warp = fast is not one of auto\|on\|off" -c "$tmp/bad.ini"
printf '[gpu]\nln_wrap = on\n' >"$tmp/bad.ini"
expect_error "misspelt [gpu] key" "$tmp/bad.ini:2: unknown key 'ln_wrap' in \[gpu\]; did you mean 'ln_warp'\?" -c "$tmp/bad.ini"

finish
