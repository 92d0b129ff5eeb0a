/* SPDX-License-Identifier: MIT */
/*
 * cuemu: the part of CUDA's cuda_bf16.h that pipehost uses (see
 * tests/cuemu/README.md).  bfloat16 is the top half of an IEEE float: 8
 * exponent bits, 7 stored mantissa bits.  Conversions round to nearest,
 * ties to even, as the GPU's cvt.rn.bf16.f32 does; a NaN stays a NaN.
 */
#ifndef CUEMU_CUDA_BF16_H
#define CUEMU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

namespace cuemu {
static inline unsigned short f2bf_rn(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign, a quiet NaN */
		return (unsigned short)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even; overflow goes to inf */
	return (unsigned short)(u >> 16);
}
static inline float bf2f(unsigned short h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}
} /* namespace cuemu */

struct __nv_bfloat16 {
	unsigned short __x;
	__nv_bfloat16() = default;
	/* as CUDA's C++ conversions: from float rounds to nearest even */
	__nv_bfloat16(float f) : __x(cuemu::f2bf_rn(f)) {}
	operator float() const { return cuemu::bf2f(__x); }
};

struct alignas(4) __nv_bfloat162 {
	__nv_bfloat16 x, y;
};

static inline __nv_bfloat16 __float2bfloat16(float f)
{
	__nv_bfloat16 h;
	h.__x = cuemu::f2bf_rn(f);
	return h;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return cuemu::bf2f(h.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
	__nv_bfloat162 r;
	r.x = __float2bfloat16(a);
	r.y = __float2bfloat16(b);
	return r;
}
static inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
static inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }

#endif
