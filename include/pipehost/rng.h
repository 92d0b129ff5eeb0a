/* SPDX-License-Identifier: MIT */
/*
 * Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11), the
 * generator cuRAND also uses, so a CUDA twin of a layer can draw the same
 * numbers.  There is no state to carry: the same (key, counter) always gives
 * the same four words, which is what lets recomputation, any schedule and
 * any placement reproduce dropout masks and initial weights exactly.
 */
#ifndef PIPEHOST_RNG_H
#define PIPEHOST_RNG_H

#include <stdint.h>

/* Callable from CUDA kernels too: a layer's .cu twin draws the same bits. */
#ifdef __CUDACC__
#define PH_RNG_FN static inline __host__ __device__
#else
#define PH_RNG_FN static inline
#endif

typedef struct {
	uint32_t v[4];
} ph_philox4;

PH_RNG_FN ph_philox4 ph_philox4x32(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo)
{
	uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
	uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
	uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
	for (int r = 0; r < 10; r++) {
		uint64_t p0 = (uint64_t)0xD2511F53u * c0;
		uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
		uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
		uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
		c1 = (uint32_t)p1;
		c3 = (uint32_t)p0;
		c0 = n0;
		c2 = n2;
		k0 += 0x9E3779B9u;
		k1 += 0xBB67AE85u;
	}
	ph_philox4 out = { { c0, c1, c2, c3 } };
	return out;
}

/* Mix several 64-bit words into one key (splitmix64 finaliser). */
PH_RNG_FN uint64_t ph_mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

/* The key of a (seed, step, micro-batch, layer) draw. */
PH_RNG_FN uint64_t ph_rng_key(uint64_t seed, uint64_t step, uint64_t mb, uint64_t layer)
{
	return ph_mix64(ph_mix64(ph_mix64(ph_mix64(seed) ^ step) ^ mb) ^ layer);
}

/* Uniform float in [0, 1) from 32 random bits (24 significant bits). */
PH_RNG_FN float ph_u01(uint32_t bits)
{
	return (float)(bits >> 8) * (1.0f / 16777216.0f);
}

/* The i-th uniform number of stream `key`: element i of a tensor. */
PH_RNG_FN float ph_rng_uniform(uint64_t key, uint64_t i)
{
	ph_philox4 r = ph_philox4x32(key, 0, i >> 2);
	return ph_u01(r.v[i & 3]);
}

#endif /* PIPEHOST_RNG_H */
