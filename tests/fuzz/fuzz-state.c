/* SPDX-License-Identifier: MIT */
/* libFuzzer: a checkpoint's state.json parser and the identity comparison
 * that explains a digest mismatch. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

/* checkpoint.c asks the engine for tensors only when saving or loading,
 * which this harness never does. */
int ph_engine_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	(void)e, (void)refs, (void)n;
	return ph_fail(err, PH_EINTERNAL, "no engine in the fuzzer");
}
int ph_engine_state_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	(void)e, (void)refs, (void)n;
	return ph_fail(err, PH_EINTERNAL, "no engine in the fuzzer");
}
int ph_engine_upload_tensors(ph_engine *e, ph_err *err)
{
	(void)e;
	return ph_fail(err, PH_EINTERNAL, "no engine in the fuzzer");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ph_ckpt_state st;
	ph_err err = { { 0 } };
	int rc = ph_checkpoint_parse_state((const char *)data, size, "fuzz/state.json", &st, &err);
	if (rc != PH_OK) {
		if (!err.msg[0])
			abort();
		return 0;
	}
	if (st.step < 0 || st.seed < 0 || strlen(st.digest) != 16)
		abort(); /* accepted, so it must be valid */
	static const char ours[] = "format=pipehost-checkpoint/1\nrun.seed=7\nrun.batch=32\noptimizer.lr=0.01\n"
				   "layer fc1.units=16\ntensor fc1.weight=[16,64]\n";
	char buf[160];
	ph_checkpoint_diff(ours, st.identity, buf, sizeof buf);
	ph_checkpoint_diff(st.identity, ours, buf, sizeof buf);
	ph_checkpoint_diff(st.identity, st.identity, buf, sizeof buf);
	if (st.identity && buf[0])
		abort(); /* a text differs from itself */
	ph_ckpt_state_free(&st);
	return 0;
}
