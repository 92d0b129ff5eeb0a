/* SPDX-License-Identifier: MIT */
/* The optimizer update and the clip norm's sums of squares on a rank's GPU
 * (optimizer.h), one tensor per launch or many.
 *
 * The arithmetic mirrors core/optim.c operation for operation with the _rn
 * intrinsics, which nvcc never fuses into FMAs, so a GPU step rounds
 * exactly as the CPU's plain float loop does; the batched kernels call the
 * same element functions, so a tensor gets the same bits either way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_try.h"
#include "kernels.cuh"
#include "optimizer.h"

typedef struct {
	float lr, mom, wd; /* wd: for tensors with decay; the others take 0 */
	int nesterov;
} sgd_args;

typedef struct {
	float step_size, bc2_sqrt, b1, b2, one_b1, one_b2, eps;
	float keep; /* 1 - lr * weight_decay, for tensors with decay; the others keep 1 */
} adamw_args;

typedef struct {
	float lr, b1, one_b1, b2, one_b2;
	float keep; /* 1 - lr * weight_decay, for tensors with decay; the others keep 1 */
} lion_args;

/* optim.c lion()'s step scalars */
static lion_args lion_make(const ph_optim_config *c, double lr)
{
	lion_args a;
	a.lr = (float)lr;
	a.b1 = (float)c->beta1;
	a.one_b1 = (float)(1.0 - c->beta1);
	a.b2 = (float)c->beta2;
	a.one_b2 = (float)(1.0 - c->beta2);
	a.keep = (float)(1.0 - lr * c->weight_decay);
	return a;
}

static sgd_args sgd_make(const ph_optim_config *c, double lr)
{
	sgd_args a;
	a.lr = (float)lr;
	a.mom = (float)c->momentum;
	a.wd = (float)c->weight_decay;
	a.nesterov = c->nesterov;
	return a;
}

/* optim.c adamw()'s step scalars for step t >= 1 */
static adamw_args adamw_make(const ph_optim_config *c, int64_t t, double lr)
{
	if (t < 1)
		t = 1;
	adamw_args a;
	double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
	a.step_size = (float)(lr / bc1);
	a.bc2_sqrt = (float)sqrt(bc2);
	a.b1 = (float)c->beta1;
	a.b2 = (float)c->beta2;
	a.one_b1 = (float)(1.0 - c->beta1);
	a.one_b2 = (float)(1.0 - c->beta2);
	a.eps = (float)c->eps;
	a.keep = (float)(1.0 - lr * c->weight_decay);
	return a;
}

/* The gradient as the update reads it: clipped, g = (float)(g * clip) with
 * the product in double as the CPU does, where clip != 1; the element is
 * zeroed for the next step's accumulation in the same pass. */
__device__ static inline float take_grad(float *g, int64_t i, double clip)
{
	float gi = g[i];
	if (clip != 1.0)
		gi = __double2float_rn(__dmul_rn((double)gi, clip));
	g[i] = 0.f;
	return gi;
}

/* optim.c sgd(): d = g + wd*w; v = mom*s + d; w -= lr * (nesterov ? d + mom*v : v) */
__device__ static inline void sgd_elem(const sgd_args &a, float wd, double clip, float *w, float *g, float *s,
				       int64_t i)
{
	float d = take_grad(g, i, clip);
	if (wd != 0.f)
		d = __fadd_rn(d, __fmul_rn(wd, w[i]));
	float v = __fadd_rn(__fmul_rn(a.mom, s[i]), d);
	s[i] = v;
	float step = a.nesterov ? __fadd_rn(d, __fmul_rn(a.mom, v)) : v;
	w[i] = __fsub_rn(w[i], __fmul_rn(a.lr, step));
}

/* The clip of take_grad on a value already loaded. */
__device__ static inline float clip_grad(float gi, double clip)
{
	return clip != 1.0 ? __double2float_rn(__dmul_rn((double)gi, clip)) : gi;
}

/* optim.c adamw() on one element's values: decoupled decay, then the
 * moments, then the step; gi is the gradient as take_grad gives it. */
__device__ static inline void adamw_vals(const adamw_args &a, float keep, float gi, float &wi, float &mi, float &vi)
{
	if (keep != 1.f)
		wi = __fmul_rn(wi, keep);
	mi = __fadd_rn(__fmul_rn(a.b1, mi), __fmul_rn(a.one_b1, gi));
	vi = __fadd_rn(__fmul_rn(a.b2, vi), __fmul_rn(__fmul_rn(a.one_b2, gi), gi));
	float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
	wi = __fsub_rn(wi, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
}

/* optim.c lion() on one element: decoupled decay, the sign of
 * b1*m + (1-b1)*g as the step, then the moment */
__device__ static inline void lion_elem(const lion_args &a, float keep, double clip, float *w, float *g, float *m,
					int64_t i)
{
	float wi = w[i], mi = m[i];
	const float gi = take_grad(g, i, clip);
	if (keep != 1.f)
		wi = __fmul_rn(wi, keep);
	const float ci = __fadd_rn(__fmul_rn(a.b1, mi), __fmul_rn(a.one_b1, gi));
	if (ci > 0.f)
		wi = __fsub_rn(wi, a.lr);
	else if (ci < 0.f)
		wi = __fadd_rn(wi, a.lr);
	m[i] = __fadd_rn(__fmul_rn(a.b2, mi), __fmul_rn(a.one_b2, gi));
	w[i] = wi;
}

__device__ static inline void adamw_elem(const adamw_args &a, float keep, double clip, float *w, float *g, float *m,
					 float *v, int64_t i)
{
	float wi = w[i], mi = m[i], vi = v[i];
	float gi = take_grad(g, i, clip);
	adamw_vals(a, keep, gi, wi, mi, vi);
	m[i] = mi;
	v[i] = vi;
	w[i] = wi;
}

__global__ static void k_sgd(sgd_args a, float wd, double clip, float *w, float *g, float *s, int64_t n)
{
	K_GRID_STRIDE(i, n)
	sgd_elem(a, wd, clip, w, g, s, i);
}

__global__ static void k_lion(lion_args a, float keep, double clip, float *w, float *g, float *m, int64_t n)
{
	K_GRID_STRIDE(i, n)
	lion_elem(a, keep, clip, w, g, m, i);
}

__global__ static void k_adamw(adamw_args a, float keep, double clip, float *w, float *g, float *m, float *v,
			       int64_t n)
{
	K_GRID_STRIDE(i, n)
	adamw_elem(a, keep, clip, w, g, m, v, i);
}

int ph_cuda_optim_update(cudaStream_t st, const ph_optim_config *c, int64_t t, double lr, double clip, float *w,
			 float *g, float *s, int64_t n, int decay, ph_err *err)
{
	if (n <= 0)
		return PH_OK;
	const unsigned blocks = ph_k_blocks(n);
	if (c->type == PH_OPTIM_ADAMW) {
		const adamw_args a = adamw_make(c, t, lr);
		k_adamw<<<blocks, 256, 0, st>>>(a, decay ? a.keep : 1.f, clip, w, g, s, s + n, n);
	} else if (c->type == PH_OPTIM_LION) {
		const lion_args a = lion_make(c, lr);
		k_lion<<<blocks, 256, 0, st>>>(a, decay ? a.keep : 1.f, clip, w, g, s, n);
	} else {
		const sgd_args a = sgd_make(c, lr);
		k_sgd<<<blocks, 256, 0, st>>>(a, decay ? a.wd : 0.f, clip, w, g, s, n);
	}
	TRY(err, cudaGetLastError());
	return PH_OK;
}

/* ---------------------------------------------------------------- */
/* Many tensors per launch                                            */

/* One tensor of a batched launch; first_block: the update kernel's first
 * block for it (the blocks before it belong to the tensors before). */
typedef struct {
	float *w, *g, *s;
	int64_t n;
	int decay;
	unsigned first_block;
} tensor_desc;

enum { PER_THREAD = 4, UPDATE_THREADS = 256, SLOT_UPDATE = 0, SLOT_SUMSQ = 1 };

/* The update kernel's blocks: each tensor's share, PER_THREAD elements a
 * thread, the tensor found by a binary search over first_block. */
__global__ static void k_update_many(int type, adamw_args a, sgd_args sg, lion_args li, double clip,
				     const tensor_desc *T, int count)
{
	const unsigned b = blockIdx.x;
	int lo = 0, hi = count - 1; /* the last tensor whose first block is <= b */
	while (lo < hi) {
		const int mid = (lo + hi + 1) >> 1;
		if (T[mid].first_block <= b)
			lo = mid;
		else
			hi = mid - 1;
	}
	const tensor_desc d = T[lo];
	const int64_t base = (int64_t)(b - d.first_block) * blockDim.x * PER_THREAD + threadIdx.x;
	if (type == PH_OPTIM_ADAMW) {
		/* every load of the thread's elements first, so that 4 x 4 are in
		 * flight at once rather than 4 (the stores of one element could
		 * alias the loads of the next, which the compiler would not move
		 * past them); then the same arithmetic as adamw_elem */
		const float keep = d.decay ? a.keep : 1.f;
		float *__restrict__ w = d.w, *__restrict__ g = d.g, *__restrict__ m = d.s, *__restrict__ v = d.s + d.n;
		float wv[PER_THREAD], gv[PER_THREAD], mv[PER_THREAD], vv[PER_THREAD];
#pragma unroll
		for (int k = 0; k < PER_THREAD; k++) {
			const int64_t i = base + (int64_t)k * blockDim.x;
			if (i < d.n) {
				wv[k] = w[i];
				gv[k] = g[i];
				mv[k] = m[i];
				vv[k] = v[i];
			}
		}
#pragma unroll
		for (int k = 0; k < PER_THREAD; k++) {
			const int64_t i = base + (int64_t)k * blockDim.x;
			if (i < d.n) {
				adamw_vals(a, keep, clip_grad(gv[k], clip), wv[k], mv[k], vv[k]);
				g[i] = 0.f;
				m[i] = mv[k];
				v[i] = vv[k];
				w[i] = wv[k];
			}
		}
		return;
	}
	for (int k = 0; k < PER_THREAD; k++) {
		const int64_t i = base + (int64_t)k * blockDim.x;
		if (i >= d.n)
			break;
		if (type == PH_OPTIM_LION)
			lion_elem(li, d.decay ? li.keep : 1.f, clip, d.w, d.g, d.s, i);
		else
			sgd_elem(sg, d.decay ? sg.wd : 0.f, clip, d.w, d.g, d.s, i);
	}
}

/* grid (PH_K_SUMSQ_BLOCKS, tensors): block (x, y) is block x of tensor y's
 * one-tensor launch (k_sumsq_partial), the same strides and tree */
__global__ static void k_sumsq_many_partial(const tensor_desc *T, double *partial)
{
	__shared__ double sh[256];
	const tensor_desc d = T[blockIdx.y];
	k_sumsq_block(d.g, d.n, partial + (size_t)blockIdx.y * PH_K_SUMSQ_BLOCKS, sh);
}

/* grid (tensors), PH_K_SUMSQ_BLOCKS threads: k_sumsq_final per tensor */
__global__ static void k_sumsq_many_final(const double *partial, double *out)
{
	__shared__ double sh[PH_K_SUMSQ_BLOCKS];
	k_sumsq_tree(partial + (size_t)blockIdx.x * PH_K_SUMSQ_BLOCKS, out + blockIdx.x, sh);
}

/* A list of descriptions on the GPU, and its pinned twin on the host. */
typedef struct {
	tensor_desc *host, *dev;
	int cap, count; /* count: what dev holds (0: nothing yet) */
} desc_slot;

struct ph_optim_many {
	desc_slot slot[2]; /* the update's list and the clip norm's differ (tied copies) */
	double *partial;
	int partial_cap; /* tensors */
};

int ph_optim_many_open(ph_optim_many **out, ph_err *err)
{
	*out = (ph_optim_many *)calloc(1, sizeof **out);
	return *out ? PH_OK : ph_fail(err, PH_ENOMEM, "out of memory");
}

static void slot_free(desc_slot *s)
{
	if (s->host)
		cudaFreeHost(s->host);
	if (s->dev)
		cudaFree(s->dev);
	memset(s, 0, sizeof *s);
}

void ph_optim_many_close(ph_optim_many *m)
{
	if (!m)
		return;
	slot_free(&m->slot[0]);
	slot_free(&m->slot[1]);
	if (m->partial)
		cudaFree(m->partial);
	free(m);
}

/* The slot's device list made equal to d[0 .. count-1]: nothing to do when
 * it already is (every step after the first); else, once the stream has
 * drained (a queued kernel may still read the old list, a queued copy
 * still read the pinned one), a copy from the pinned twin. */
static int slot_put(desc_slot *s, cudaStream_t st, const tensor_desc *d, int count, ph_err *err)
{
	if (s->count == count && !memcmp(s->host, d, (size_t)count * sizeof *d))
		return PH_OK;
	TRY(err, cudaStreamSynchronize(st));
	if (count > s->cap) {
		slot_free(s);
		TRY(err, cudaMallocHost((void **)&s->host, (size_t)count * sizeof *d));
		TRY(err, cudaMalloc((void **)&s->dev, (size_t)count * sizeof *d));
		s->cap = count;
	}
	memcpy(s->host, d, (size_t)count * sizeof *d);
	s->count = 0; /* until the copy is queued */
	TRY(err, cudaMemcpyAsync(s->dev, s->host, (size_t)count * sizeof *d, cudaMemcpyHostToDevice, st));
	s->count = count;
	return PH_OK;
}

int ph_optim_many_update(ph_optim_many *m, cudaStream_t st, const ph_optim_config *c, int64_t t, double lr,
			 double clip, float *const *w, float *const *g, float *const *s, const int64_t *n,
			 const int *decay, int count, ph_err *err)
{
	if (count <= 0)
		return PH_OK;
	tensor_desc *d = (tensor_desc *)calloc((size_t)count, sizeof *d);
	if (!d)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	const int64_t per_block = (int64_t)UPDATE_THREADS * PER_THREAD;
	int64_t blocks = 0;
	for (int k = 0; k < count; k++) {
		d[k].w = w[k];
		d[k].g = g[k];
		d[k].s = s[k];
		d[k].n = n[k] > 0 ? n[k] : 0;
		d[k].decay = decay[k] != 0;
		d[k].first_block = (unsigned)blocks;
		blocks += (d[k].n + per_block - 1) / per_block;
	}
	int rc = PH_OK;
	if (blocks > 0x7fffffff)
		rc = ph_fail(err, PH_EINTERNAL, "optimizer: %lld blocks in one launch", (long long)blocks);
	if (!rc)
		rc = slot_put(&m->slot[SLOT_UPDATE], st, d, count, err);
	free(d);
	if (rc || blocks == 0)
		return rc;
	adamw_args a;
	sgd_args sg;
	lion_args li;
	memset(&a, 0, sizeof a);
	memset(&sg, 0, sizeof sg);
	memset(&li, 0, sizeof li);
	if (c->type == PH_OPTIM_ADAMW)
		a = adamw_make(c, t, lr);
	else if (c->type == PH_OPTIM_LION)
		li = lion_make(c, lr);
	else
		sg = sgd_make(c, lr);
	k_update_many<<<(unsigned)blocks, UPDATE_THREADS, 0, st>>>(c->type, a, sg, li, clip, m->slot[SLOT_UPDATE].dev,
								   count);
	TRY(err, cudaGetLastError());
	return PH_OK;
}

int ph_optim_many_sumsq(ph_optim_many *m, cudaStream_t st, const float *const *g, const int64_t *n, int count,
			double *out, ph_err *err)
{
	if (count <= 0)
		return PH_OK;
	if (count > 65535) /* gridDim.y */
		return ph_fail(err, PH_EINTERNAL, "clip norm: %d tensors on one rank, at most 65535 at once", count);
	tensor_desc *d = (tensor_desc *)calloc((size_t)count, sizeof *d);
	if (!d)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k < count; k++) {
		d[k].g = (float *)g[k];
		d[k].n = n[k] > 0 ? n[k] : 0;
	}
	int rc = slot_put(&m->slot[SLOT_SUMSQ], st, d, count, err);
	free(d);
	if (rc)
		return rc;
	if (count > m->partial_cap) {
		TRY(err, cudaStreamSynchronize(st)); /* the old buffer may be in use */
		if (m->partial)
			cudaFree(m->partial);
		m->partial = NULL;
		m->partial_cap = 0;
		TRY(err, cudaMalloc((void **)&m->partial, (size_t)count * PH_K_SUMSQ_BLOCKS * sizeof(double)));
		m->partial_cap = count;
	}
	k_sumsq_many_partial<<<dim3(PH_K_SUMSQ_BLOCKS, (unsigned)count), 256, 0, st>>>(m->slot[SLOT_SUMSQ].dev,
										     m->partial);
	k_sumsq_many_final<<<(unsigned)count, PH_K_SUMSQ_BLOCKS, 0, st>>>(m->partial, out);
	TRY(err, cudaGetLastError());
	return PH_OK;
}
