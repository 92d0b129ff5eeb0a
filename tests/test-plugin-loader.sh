#!/bin/sh
# SPDX-License-Identifier: MIT
# The plugin loader and --check-plugin against what a third audit found
# (docs/changes.md): an unreadable plugin directory or file is an error
# saying so; a meta with negative or non-finite FLOPs, an option table with
# a name twice or a key the host reads itself, a schedule with
# max_chunks_per_rank < 1 are refused at load or run, and --check-plugin
# fails them too, as it fails a plugin named like a built-in, a delayed
# update without a second weight version and a meta no --shape can fix.
. "$top_srcdir/tests/lib.sh"
AD="$top_builddir/tests/plugins/loader-audit/.libs"

# Each plugin in a directory of its own: --plugin-dir loads every .so of it.
for p in flops_neg flops_nan meta_zero opt_dup opt_type name_relu sched_delayed sched_silent sched_nochunks sched_chunk77 \
	sched_permb sched_permb_split name_space; do
	mkdir -p "$tmp/$p" && cp "$AD/$p.so" "$tmp/$p/" || not_ok "no $AD/$p.so"
done
cat >"$tmp/s.ini" <<'INI'
[run]
seed = 7
stages = 2
micro_batches = 2
batch = 8
steps = 1
eval = no
[data]
source = synthetic
shape = 8
classes = 4
samples = 64
test_samples = 16
[partition]
type = uniform
cost = flops
[layer fc1]
type = linear
units = 8
[layer sc]
type = audit_scale
[layer fc2]
type = linear
units = 4
[layer loss]
type = softmax_xent
INI

# check_line DESC PLUGIN REGEX [ARGS]: --check-plugin exits 1 and prints a
# line matching REGEX (extended)
check_line() {
	desc=$1 so=$2 re=$3
	shift 3
	"$PIPEHOST" --check-plugin "$so" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -eq 1 ] && grep -Eq -- "$re" "$tmp/out" && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
		ok "$desc: $(grep -E -- "$re" "$tmp/out" | head -1 | cut -c1-220)"
	else
		not_ok "$desc: exit $rc; $(grep -v '^PASS' "$tmp/out" | head -4) stderr: $(cat "$tmp/err")"
	fi
}

# B. FLOPs: a run refuses a negative or non-finite figure, naming the
# layer, its plugin and the value (it once gave costs of 0 and advice to
# use the cost it had); so does --check-plugin.
expect_error "forward FLOPs -1e9: the run" \
	"^pipehost: layer sc \(audit_scale\) reports forward FLOPs -1e\+09; FLOPs a sample are finite and 0 or more: fix the plugin's meta$" \
	-c "$tmp/s.ini" --plugin-dir "$tmp/flops_neg" --plan
expect_error "backward FLOPs NaN: the run" \
	"^pipehost: layer sc \(audit_scale\) reports backward FLOPs -?nan; .*fix the plugin's meta$" \
	-c "$tmp/s.ini" --plugin-dir "$tmp/flops_nan" --plan
check_line "forward FLOPs -1e9: --check-plugin" "$AD/flops_neg.so" \
	"^FAIL layer audit_scale: meta matches forward and backward \(batch 1\): audit_scale reports forward FLOPs -1e\+09; .*fix the plugin's meta$"
check_line "backward FLOPs NaN: --check-plugin" "$AD/flops_nan.so" \
	"^FAIL layer audit_scale: meta matches forward and backward \(batch 1\): audit_scale reports backward FLOPs -?nan"

# H. A meta broken whatever the input: no --shape advice, the meta named.
check_line "an output size of 0" "$AD/meta_zero.so" \
	"^FAIL layer audit_scale: create: create accepts input 4x8, but audit_scale meta: output dimension 0 is 0; fix the plugin's meta$"
if grep -q -- "--shape" "$tmp/out"; then not_ok "a broken meta still advises --shape: $(grep -- --shape "$tmp/out")"; else ok "a broken meta: no --shape advice"; fi

# D. Option tables: a name twice, a key the host reads itself ([layer] type).
expect_error "two options named bias: the run" \
	"^pipehost: plugin $tmp/opt_dup/opt_dup.so: layer 'audit_scale' has two options named bias \(options 0 and 1\), and an INI key can set only one; rename or remove one and rebuild$" \
	-c "$tmp/s.ini" --plugin-dir "$tmp/opt_dup" --plan
expect_error "two options named bias: --list-plugins" "has two options named bias" --plugin-dir "$tmp/opt_dup" --list-plugins
expect_error "an option named type: the run" \
	"^pipehost: plugin $tmp/opt_type/opt_type.so: layer 'audit_scale' has an option named type, a key the host reads itself in the layer's INI section, so the INI could never set it; rename it and rebuild$" \
	-c "$tmp/s.ini" --plugin-dir "$tmp/opt_type" --plan
check_line "two options named bias: --check-plugin" "$AD/opt_dup.so" "^FAIL abi and descriptor: .*has two options named bias"
check_line "an option named type: --check-plugin" "$AD/opt_type.so" "^FAIL abi and descriptor: .*has an option named type, a key the host reads itself"

# C. Named like a built-in: every run refuses it, so the checker fails it,
# naming the other file; a unique name passes that check.
check_line "a layer named relu" "$AD/name_relu.so" \
	"^FAIL layer relu: name: .*/relu\.so provides a layer named relu too, and a run refuses a name that two files on its plugin path provide"
if grep -q "^PASS layer relu: gradients (batch 4)" "$tmp/out"; then ok "the other checks still run"; else not_ok "relu's other checks: $(cat "$tmp/out")"; fi
"$PIPEHOST" --check-plugin "$AD/flops_neg.so" >"$tmp/out" 2>&1
if grep -q "^PASS layer audit_scale: name: no other plugin on the plugin path provides a layer named audit_scale" "$tmp/out"; then
	ok "a unique name: $(grep ': name:' "$tmp/out" | cut -c1-160)"
else
	not_ok "a unique name: $(grep ': name:' "$tmp/out")"
fi
# the same name in a --plugin-dir: the run given that --plugin-dir refuses
# it, so the check given it fails (it once searched only the path)
mkdir -p "$tmp/dup" && cp "$AD/flops_neg.so" "$tmp/dup/copy.so"
"$PIPEHOST" --check-plugin "$AD/flops_neg.so" --plugin-dir "$tmp/dup" >"$tmp/out" 2>&1
if grep -q "^FAIL layer audit_scale: name: $tmp/dup/copy.so provides a layer named audit_scale too" "$tmp/out"; then
	ok "--check-plugin with --plugin-dir searches it for the name too"
else
	not_ok "--check-plugin --plugin-dir: $(grep ': name:' "$tmp/out")"
fi
expect_error "a layer named relu: the run refuses it (what the check predicts)" "layer 'relu' is provided by both " \
	--plugin-dir "$tmp/name_relu" --list-plugins
# ... and a delayed update with one weight version, as every run refuses it.
check_line "a delayed update keeping 1 weight version" "$AD/sched_delayed.so" \
	"^FAIL schedule audit_sched: p=2 v=1 m=4: asks for a delayed update \(PH_SCHED_DELAYED_UPDATE\) but keeps 1 weight version\(s\) on rank 0; it needs 2"

# E. A generate that fails without a message: a fallback text, not nothing.
check_line "generate fails silently" "$AD/sched_silent.so" \
	"^FAIL schedule audit_sched: p=1 v=1 m=1: generate for rank 0 failed after its check accepted the shape: it failed without saying why; a bug in the plugin$"

# ... and so does a run, where the line ended after "schedule audit_sched: "
# (s.ini without its audit layer: built-in layers only).
sed '/^\[layer sc\]/,/^type = audit_scale/d' "$tmp/s.ini" >"$tmp/s2.ini"
expect_error "generate fails silently: the run" \
	"^pipehost: schedule audit_sched: generate failed without saying why; a bug in the plugin$" \
	-c "$tmp/s2.ini" --plugin-dir "$tmp/sched_silent" --set schedule.type=audit_sched --plan
# An action's chunk out of range is printed as the plugin gave it: the
# short form alone (F0) left chunk 77 out.
expect_error "an action of chunk 77" \
	"^pipehost: schedule audit_sched: rank 0 position 0: action F0 \(kind 0, chunk 77, micro-batch 0\) is out of range \(kinds 0\.\.3, chunks 0\.\.1, micro-batches 0\.\.1\)" \
	-c "$tmp/s2.ini" --plugin-dir "$tmp/sched_chunk77" --set schedule.type=audit_sched --plan

# Updates per micro-batch (PipeDream's stashing) in an order the versions
# cannot serve: micro-batch 1's forward before micro-batch 0's backward
# with one version trained other weights than 1F1B's order, silently.
# (s2.ini: stages = 2, so each rank keeps 1 version, the plugin's default.)
sed 's/^stages = 2/stages = 1/; s/^\[partition\]/[optimizer]\ntype = sgd\n[partition]/' "$tmp/s2.ini" >"$tmp/s1.ini"
expect_error "an update per micro-batch, fill-drain order, 1 version" \
	"^pipehost: schedule audit_sched: rank 0 position 1: F1 comes before micro-batch 0's backward; rule: updating per micro-batch with K = 1 weight version\(s\), micro-batch n's forward after n - K's backward$" \
	-c "$tmp/s1.ini" --plugin-dir "$tmp/sched_permb" --set schedule.type=audit_sched
expect_error "an update per micro-batch with split backwards" \
	"^pipehost: schedule audit_sched: rank 0 position 1: I0 splits a backward, but the schedule updates after each micro-batch's B \(PH_SCHED_UPDATE_PER_MB\); rule: full backwards only$" \
	-c "$tmp/s1.ini" --plugin-dir "$tmp/sched_permb_split" --set schedule.type=audit_sched
check_line "an update per micro-batch, fill-drain order: --check-plugin" "$AD/sched_permb.so" \
	"^FAIL schedule audit_sched: p=1 v=1 m=[0-9]+: .*F1 comes before micro-batch 0's backward"

# A name no run can take (a space, a dot, a control character) is refused
# at load; --check-plugin once passed it ("did you mean 'trail '?" later).
expect_error "a layer named \"trail \"" \
	"^pipehost: plugin $tmp/name_space/name_space.so: layer name \"trail \" has a space; a plugin name takes ASCII letters, digits, '_' and '-' only \(an INI trims spaces, --set cuts keys at dots\): rename it$" \
	--plugin-dir "$tmp/name_space" --list-plugins
check_line "a layer named \"trail \": --check-plugin" "$AD/name_space.so" \
	"^FAIL abi and descriptor: .*layer name \"trail \" has a space"
# One directory under two spellings is one set of plugins, not two that
# "provide" every schedule twice.
d1=$(echo "$PIPEHOST_PLUGIN_PATH" | cut -d: -f1)
if PIPEHOST_PLUGIN_PATH="$PIPEHOST_PLUGIN_PATH:$d1/" "$PIPEHOST" -c "$tmp/s2.ini" --plugin-dir "$d1//" --plan \
	>"$tmp/out" 2>"$tmp/err"; then
	ok "a plugin directory named twice ($d1/, $d1//) loads its plugins once"
else
	not_ok "a plugin directory named twice: $(cat "$tmp/err")"
fi

# F. max_chunks_per_rank = 0: refused at load, not "lower chunks to 1".
expect_error "max_chunks_per_rank = 0: the run" \
	"^pipehost: plugin $tmp/sched_nochunks/sched_nochunks.so: schedule 'audit_sched' has max_chunks_per_rank = 0; set it to 1" \
	-c "$tmp/s.ini" --plugin-dir "$tmp/sched_nochunks" --set schedule.type=audit_sched --plan
check_line "max_chunks_per_rank = 0: --check-plugin" "$AD/sched_nochunks.so" \
	"^FAIL abi and descriptor: .*has max_chunks_per_rank = 0"

# A directory on the path that does not exist is still no error: the
# layer is then unknown, as before.
PIPEHOST_PLUGIN_PATH="$tmp/none:$PIPEHOST_PLUGIN_PATH" expect_error "a missing directory is skipped" \
	"unknown layer plugin 'audit_scale' in \[layer sc\]: add its --plugin-dir or install it; searched: .*$tmp/none \(missing\)" -c "$tmp/s.ini" --plan

# A and G. A plugin directory or file this user cannot read.  Root reads
# mode 000, so as root the cases run as nobody (runuser); without a way
# to, they are skipped.
as_user=
if [ "$(id -u)" -ne 0 ]; then
	as_user=direct
elif command -v runuser >/dev/null 2>&1 && id nobody >/dev/null 2>&1 &&
	runuser -u nobody -- "$PIPEHOST" --version >/dev/null 2>&1; then
	as_user=nobody
fi
if [ -z "$as_user" ]; then
	ok "# SKIP unreadable plugin directories and files: running as root without runuser and a user nobody who can run $PIPEHOST"
else
	chmod 755 "$tmp" && chmod 644 "$tmp/s.ini"
	mkdir -p "$tmp/d000" "$tmp/d311" "$tmp/f000"
	for d in d000 d311 f000; do cp "$AD/flops_neg.so" "$tmp/$d/audit.so"; done
	chmod 000 "$tmp/d000"
	chmod 311 "$tmp/d311"
	chmod 000 "$tmp/f000/audit.so"
	real=$PIPEHOST
	if [ "$as_user" = nobody ]; then
		printf '#!/bin/sh\nexec runuser -u nobody -- env PIPEHOST_PLUGIN_PATH="$PIPEHOST_PLUGIN_PATH" "%s" "$@"\n' \
			"$real" >"$tmp/as-user"
		chmod 755 "$tmp/as-user"
		PIPEHOST=$tmp/as-user
	fi
	deny="cannot be read: Permission denied; give this user read and search permission on it \(chmod a\+rx"
	expect_error "--plugin-dir of mode 000" "^pipehost: plugin directory $tmp/d000 $deny $tmp/d000\) or take it off the plugin path$" \
		-c "$tmp/s.ini" --plugin-dir "$tmp/d000" --plan
	expect_error "--plugin-dir of mode 311" "^pipehost: plugin directory $tmp/d311 $deny" \
		-c "$tmp/s.ini" --plugin-dir "$tmp/d311" --plan
	PIPEHOST_PLUGIN_PATH="$tmp/d311:$PIPEHOST_PLUGIN_PATH" expect_error "PIPEHOST_PLUGIN_PATH of mode 311" \
		"^pipehost: plugin directory $tmp/d311 $deny" -c "$tmp/s.ini" --plan
	sed 's|^\[run\]$|[run]\nplugin_path = d000|' "$tmp/s.ini" >"$tmp/p.ini" && chmod 644 "$tmp/p.ini"
	expect_error "[run] plugin_path of mode 000" "^pipehost: plugin directory $tmp/d000 $deny" -c "$tmp/p.ini" --plan
	expect_error "a plugin file of mode 000" \
		"^pipehost: plugin $tmp/f000/audit.so cannot be loaded: .*Permission denied; it is not readable by this user: check its permissions \(chmod a\+r $tmp/f000/audit.so\)" \
		-c "$tmp/s.ini" --plugin-dir "$tmp/f000" --plan
	PIPEHOST=$real
	chmod 755 "$tmp/d000" "$tmp/d311"
	chmod 644 "$tmp/f000/audit.so"
fi
finish
