/* SPDX-License-Identifier: MIT */
/* Data sets, whatever their source: freeing them, the epoch order,
 * drawing a batch, and finding an id past a model's limits.  Each source
 * is a file of its own (data_*.c, listed in data_sources.c). */
#include "data.h"
#include "readfile.h"

#include <stdio.h>
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

void ph_data_empty_split(ph_dataset *ds, const ph_shape *shape, int tps)
{
	memset(ds, 0, sizeof *ds);
	ds->shape = *shape;
	ds->targets_per_sample = tps;
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

int64_t ph_data_first_outside(const ph_dataset *ds, int64_t n, int target, int64_t limit)
{
	int64_t per = target ? ds->targets_per_sample : ph_shape_numel(&ds->shape);
	if (n > ds->n)
		n = ds->n;
	if (n <= 0 || per <= 0)
		return -1;
	int64_t count = n * per;
	if (target) {
		for (int64_t k = 0; k < count; k++)
			if (ds->y[k] < 0 || ds->y[k] >= limit)
				return k;
		return -1;
	}
	/* an input the first layer reads as an id: a whole number, held
	 * exactly (ids travel as floats, exact up to 2^24); NaN fails >= 0 */
	for (int64_t k = 0; k < count; k++) {
		double v = ds->x[k];
		if (!(v >= 0 && v < (double)limit) || v != (double)(int64_t)v)
			return k;
	}
	return -1;
}

void ph_data_where(const ph_dataset *ds, const char *split, int target, int64_t k, char *buf, size_t len)
{
	int64_t per = target ? ds->targets_per_sample : ph_shape_numel(&ds->shape);
	if (per < 1)
		per = 1;
	int64_t i = k / per, t = k % per;
	if (ds->unit) /* a stream: the id's place in it, then in the sample */
		snprintf(buf, len, "%s %lld (%s sample %lld, position %lld)", ds->unit, (long long)(ds->first + k + target),
			 split, (long long)i, (long long)t);
	else if (per == 1)
		snprintf(buf, len, "index %lld (%s sample %lld)", (long long)i, split, (long long)i);
	else
		snprintf(buf, len, "%s sample %lld, element %lld", split, (long long)i, (long long)t);
}
