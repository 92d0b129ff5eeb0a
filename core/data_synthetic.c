/* SPDX-License-Identifier: MIT */
/* The synthetic data source: learnable classes made from the run's seed
 * (a fixed random prototype per class plus noise), for tests and benches. */
#include <stdlib.h>
#include <string.h>

#include "data_source.h"

/* Stream tags, so the prototypes, the noise and the label order never share
 * random numbers with each other or with the epoch permutations (0xDA7A). */
#define SYN_PROTO 0x5950524FULL /* "PROT" */
#define SYN_NOISE 0x4E4F4953ULL /* "NOIS" */
#define SYN_ORDER 0x4F524452ULL /* "ORDR" */

int ph_data_synthetic(int64_t n, const ph_shape *shape, int nclasses, uint64_t seed,
		      ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (n <= 0 || n > PH_DATA_MAX_ELEMS)
		return ph_fail(err, PH_EINVAL, "synthetic data: %lld samples; use 1..%lld",
			       (long long)n, PH_DATA_MAX_ELEMS);
	if (nclasses < 2 || nclasses > (1 << 20)) /* [data] classes' range (config.c) */
		return ph_fail(err, PH_EINVAL, "synthetic data: %d classes; set [data] classes to 2..%d", nclasses, 1 << 20);
	if (!shape || shape->ndim < 1 || shape->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "synthetic data: a sample needs 1..%d "
			       "dimensions", PH_MAX_DIMS);
	int64_t numel = 1;
	for (int i = 0; i < shape->ndim; i++) {
		if (shape->d[i] < 1 || shape->d[i] > PH_DATA_MAX_ELEMS)
			return ph_fail(err, PH_EINVAL, "synthetic data: dimension %d is "
				       "%lld; use 1..%lld", i, (long long)shape->d[i],
				       PH_DATA_MAX_ELEMS);
		numel *= shape->d[i];
		if (numel > PH_DATA_MAX_ELEMS)
			break;
	}
	/* Division, not multiplication, so the check itself cannot overflow. */
	if (numel > PH_DATA_MAX_ELEMS || n > PH_DATA_MAX_ELEMS / numel ||
	    (int64_t)nclasses > PH_DATA_MAX_ELEMS / numel)
		return ph_fail(err, PH_EINVAL, "synthetic data: %lld samples (or %d "
			       "classes) of %lld values exceed %lld values in all; make "
			       "it smaller", (long long)n, nclasses, (long long)numel,
			       PH_DATA_MAX_ELEMS);

	float *x = malloc((size_t)(n * numel) * sizeof *x);
	int32_t *y = malloc((size_t)n * sizeof *y);
	float *proto = malloc((size_t)(nclasses * numel) * sizeof *proto);
	int64_t *perm = malloc((size_t)n * sizeof *perm);
	if (!x || !y || !proto || !perm) {
		free(x);
		free(y);
		free(proto);
		free(perm);
		return ph_fail(err, PH_ENOMEM, "synthetic data: no memory for %lld samples "
			       "of %lld values", (long long)n, (long long)numel);
	}

	/* Prototypes uniform in [-1,1); noise uniform in [-0.5,0.5).  Per value
	 * the prototypes differ by ~0.8 on average while noise is 0.29 rms, so a
	 * linear model separates the classes once a sample has a few values. */
	for (int c = 0; c < nclasses; c++) {
		uint64_t key = ph_rng_key(seed, SYN_PROTO, (uint64_t)c, 0);
		for (int64_t j = 0; j < numel; j++)
			proto[c * numel + j] = 2.f * ph_rng_uniform(key, (uint64_t)j) - 1.f;
	}
	/* Labels i mod nclasses (balanced), in an order fixed by the seed. */
	ph_data_permutation(ph_mix64(seed ^ SYN_ORDER), 0, n, perm);
	for (int64_t i = 0; i < n; i++) {
		int32_t c = (int32_t)(perm[i] % nclasses);
		uint64_t key = ph_rng_key(seed, SYN_NOISE, (uint64_t)i, 0);
		const float *p = proto + c * numel;
		float *xi = x + i * numel;
		for (int64_t j = 0; j < numel; j++)
			xi[j] = p[j] + 0.5f * (2.f * ph_rng_uniform(key, (uint64_t)j) - 1.f);
		y[i] = c;
	}
	free(proto);
	free(perm);

	ds->n = n;
	ds->shape = *shape;
	ds->targets_per_sample = 1;
	ds->nclasses = nclasses;
	snprintf(ds->x_from, sizeof ds->x_from, "synthetic: [data] shape");
	snprintf(ds->y_from, sizeof ds->y_from, "synthetic: [data] classes = %d", nclasses);
	ds->x = x;
	ds->y = y;
	return PH_OK;
}

static int syn_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	memset(s, 0, sizeof *s);
	if (c->data.shape.n < 1 || c->data.shape.n > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "[data] shape needs 1 to %d dimensions", PH_MAX_DIMS);
	s->ndim = c->data.shape.n;
	for (int i = 0; i < s->ndim; i++)
		s->d[i] = c->data.shape.v[i];
	return PH_OK;
}

/* The evaluation split shares the class prototypes (same seed) but not
 * the samples: the last test_samples of samples + test_samples made. */
static int syn_load(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	uint64_t seed = (uint64_t)c->run.seed;
	memset(eval, 0, sizeof *eval);
	int rc = ph_data_synthetic(c->data.samples, shape, (int)c->data.classes, seed, train, err);
	if (rc)
		return rc;
	ph_dataset all;
	rc = ph_data_synthetic(c->data.samples + c->data.test_samples, shape, (int)c->data.classes, seed, &all, err);
	if (rc) {
		ph_data_free(train);
		return rc;
	}
	int64_t numel = ph_shape_numel(shape);
	*eval = all;
	eval->n = c->data.test_samples;
	eval->x = malloc((size_t)(eval->n * numel) * sizeof(float));
	eval->y = malloc((size_t)eval->n * all.targets_per_sample * sizeof(int32_t));
	if (!eval->x || !eval->y) {
		free(eval->x);
		free(eval->y);
		memset(eval, 0, sizeof *eval);
		ph_data_free(&all);
		ph_data_free(train);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	memcpy(eval->x, all.x + c->data.samples * numel, (size_t)(eval->n * numel) * sizeof(float));
	memcpy(eval->y, all.y + c->data.samples * all.targets_per_sample,
	       (size_t)eval->n * all.targets_per_sample * sizeof(int32_t));
	ph_data_free(&all);
	return PH_OK;
}

static const char *const syn_keys[] = { "samples", "test_samples", "classes", "shape", NULL };

const ph_data_source ph_data_source_synthetic = {
	.name = "synthetic",
	.help = "classes made from [run] seed: a random prototype per class plus noise",
	.keys = syn_keys,
	.sample_shape = syn_shape,
	.load = syn_load,
};
