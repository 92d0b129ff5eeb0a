/* SPDX-License-Identifier: MIT */
/* Data sets, whatever their source: freeing them, the epoch order, and
 * drawing a batch.  Each source is a file of its own (data_*.c, listed in
 * data_sources.c). */
#include "data.h"
#include "readfile.h"

#include <stdlib.h>
#include <string.h>

void ph_data_free(ph_dataset *ds)
{
	if (!ds)
		return;
	free(ds->x);
	free(ds->y);
	memset(ds, 0, sizeof *ds);
}

void ph_data_permutation(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm)
{
	if (n <= 0)
		return;
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	/* Fisher-Yates from the top.  Step i draws 64 bits at counter i, so the
	 * whole order is a pure function of (seed, epoch, n).  j = floor(r*(i+1)
	 * / 2^64) is Lemire's multiply-shift; its bias is below (i+1)/2^64. */
	uint64_t key = ph_rng_key(seed, epoch, 0xDA7A, 0);
	for (int64_t i = n - 1; i > 0; i--) {
		ph_philox4 r = ph_philox4x32(key, 0, (uint64_t)i);
		uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
		int64_t j = (int64_t)(((unsigned __int128)bits * (uint64_t)(i + 1)) >> 64);
		int64_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

void ph_data_gather(const ph_dataset *ds, const int64_t *idx, int count, float *x, int32_t *y)
{
	int64_t numel = ph_shape_numel(&ds->shape);
	int tps = ds->targets_per_sample;
	for (int k = 0; k < count; k++) {
		int64_t i = idx[k];
		if (x)
			memcpy(x + (int64_t)k * numel, ds->x + i * numel,
			       (size_t)numel * sizeof *x);
		if (y)
			memcpy(y + (int64_t)k * tps, ds->y + i * tps, (size_t)tps * sizeof *y);
	}
}

