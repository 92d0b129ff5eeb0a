/* SPDX-License-Identifier: MIT */
/*
 * bf16_operands.cu: bf16 copies of a product's operands (bf16_operands.h).
 *
 * Parameter shadows live in one process-wide table, sorted by address:
 * a write is reported by whichever rank's op makes it (an upload, a tied
 * copy from another GPU, the optimizer), and the product that reads the
 * block next runs on the owner's stream.  Each block has two counters:
 * `written`, bumped by every reported write, and `cast`, the value of
 * `written` the shadow was last made from.  The engine orders a weight's
 * writes before the products that read it (the optimizer runs between
 * steps), so the host sees the bump before it queues the next product, and
 * the cast queued then reads the new weights in stream order.  A mutex
 * guards the table: a few dozen blocks, touched once per product or copy.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "bf16_operands.h"

/* ---------------------------------------------------------------- */
/* Kernels                                                            */

/* dst[i] = bf16_rn(src[i]), i < n; two per thread, one 4-byte store (dst
 * is 4-byte aligned: cudaMalloc's, at an even offset) */
__global__ static void k_cast_flat(const float *src, __nv_bfloat16 *dst, int64_t n)
{
	const int64_t pairs = (n + 1) / 2;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < pairs;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t k = 2 * i;
		if (k + 1 < n)
			*(__nv_bfloat162 *)(dst + k) = __floats2bfloat162_rn(src[k], src[k + 1]);
		else
			dst[k] = __float2bfloat16_rn(src[k]);
	}
}

/* rows_total = batch * rows rows of cols floats: row r of matrix b at
 * src + b*stride + i*ld (r = b*rows + i) to dst + r*ldd.  Blocks stride
 * over the rows (y) and the columns (x). */
__global__ static void k_cast_rows(const float *src, int64_t stride, int ld, int rows, __nv_bfloat16 *dst, int ldd,
				   int64_t rows_total, int cols)
{
	for (int64_t r = blockIdx.y; r < rows_total; r += gridDim.y) {
		const float *s = src + (r / rows) * stride + (r % rows) * (int64_t)ld;
		__nv_bfloat16 *d = dst + r * ldd;
		for (int c = 2 * (blockIdx.x * blockDim.x + threadIdx.x); c < cols; c += 2 * gridDim.x * blockDim.x) {
			if (c + 1 < cols)
				*(__nv_bfloat162 *)(d + c) = __floats2bfloat162_rn(s[c], s[c + 1]);
			else
				d[c] = __float2bfloat16_rn(s[c]);
		}
	}
}

static unsigned flat_blocks(int64_t n)
{
	int64_t b = ((n + 1) / 2 + 255) / 256;
	return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

/* ---------------------------------------------------------------- */
/* Parameter shadows                                                  */

typedef struct {
	const char *base;
	size_t bytes;
	__nv_bfloat16 *shadow;
	uint64_t written, cast;
} pblock;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static pblock *table;
static int nblocks, table_cap;

/* The index of the last block with base <= p, or -1. */
static int floor_block(const char *p)
{
	int lo = 0, hi = nblocks - 1, at = -1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (table[mid].base <= p)
			at = mid, lo = mid + 1;
		else
			hi = mid - 1;
	}
	return at;
}

int ph_bf16_params_register(const float *w, int64_t n, ph_err *err)
{
	if (!w || n <= 0)
		return PH_OK;
	const char *base = (const char *)w;
	pthread_mutex_lock(&table_mu);
	int at = floor_block(base);
	if (at >= 0 && table[at].base == base) {
		pthread_mutex_unlock(&table_mu);
		return PH_OK;
	}
	if (nblocks == table_cap) {
		int cap = table_cap ? 2 * table_cap : 32;
		pblock *t = (pblock *)realloc(table, (size_t)cap * sizeof *t);
		if (!t) {
			pthread_mutex_unlock(&table_mu);
			return ph_fail(err, PH_ENOMEM, "out of memory");
		}
		table = t;
		table_cap = cap;
	}
	void *shadow = NULL;
	cudaError_t e = cudaMalloc(&shadow, (size_t)n * sizeof(__nv_bfloat16));
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		pthread_mutex_unlock(&table_mu);
		return ph_fail(err, PH_ENOMEM, "no GPU memory for the bf16 copy of %lld parameters (%.1f MiB): %s",
			       (long long)n, n * 2.0 / 1048576.0, cudaGetErrorString(e));
	}
	memmove(&table[at + 2], &table[at + 1], (size_t)(nblocks - at - 1) * sizeof *table);
	pblock *b = &table[at + 1];
	b->base = base;
	b->bytes = (size_t)n * sizeof(float);
	b->shadow = (__nv_bfloat16 *)shadow;
	b->written = 1; /* never cast: stale */
	b->cast = 0;
	nblocks++;
	pthread_mutex_unlock(&table_mu);
	return PH_OK;
}

void ph_bf16_params_forget(const void *p)
{
	pthread_mutex_lock(&table_mu);
	int at = floor_block((const char *)p);
	if (at >= 0 && table[at].base == (const char *)p) {
		cudaFree(table[at].shadow);
		memmove(&table[at], &table[at + 1], (size_t)(nblocks - at - 1) * sizeof *table);
		nblocks--;
	}
	pthread_mutex_unlock(&table_mu);
}

void ph_bf16_params_wrote(const void *p, size_t bytes)
{
	if (!bytes)
		return;
	const char *lo = (const char *)p, *hi = lo + bytes;
	pthread_mutex_lock(&table_mu);
	/* blocks do not overlap: walk back from the last one starting below hi */
	for (int k = floor_block(hi - 1); k >= 0 && table[k].base + table[k].bytes > lo; k--)
		table[k].written++;
	pthread_mutex_unlock(&table_mu);
}

int ph_bf16_param_view(const float *p, int64_t extent, cudaStream_t st, const void **view, ph_err *err)
{
	*view = NULL;
	const char *c = (const char *)p;
	pthread_mutex_lock(&table_mu);
	int at = floor_block(c);
	if (at < 0 || c + extent * (int64_t)sizeof(float) > table[at].base + table[at].bytes) {
		pthread_mutex_unlock(&table_mu);
		return PH_OK;
	}
	pblock *b = &table[at];
	const int64_t n = (int64_t)(b->bytes / sizeof(float));
	if (b->cast != b->written) {
		k_cast_flat<<<flat_blocks(n), 256, 0, st>>>((const float *)b->base, b->shadow, n);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess) {
			pthread_mutex_unlock(&table_mu);
			return ph_fail(err, PH_EINTERNAL, "bf16 copy of %lld parameters: %s", (long long)n,
				       cudaGetErrorString(e));
		}
		b->cast = b->written;
	}
	*view = b->shadow + (p - (const float *)b->base);
	pthread_mutex_unlock(&table_mu);
	return PH_OK;
}

/* ---------------------------------------------------------------- */
/* Staging                                                            */

int ph_bf16_stage_cast(ph_bf16_stage *s, const float *src, int rows, int cols, int ld, int batch, int64_t stride,
		       cudaStream_t st, const void **out, int *ld_out, int64_t *stride_out, ph_err *err)
{
	const int ldd = (cols + 7) / 8 * 8;
	const int nmat = stride == 0 ? 1 : batch;
	const size_t need = (size_t)nmat * rows * ldd * sizeof(__nv_bfloat16);
	if (need > s->cap) {
		/* Grown in stream order where the device has a memory pool (every
		 * GPU since Volta with a recent driver): the products queued before
		 * still read the old buffer, and cudaFree would wait for the whole
		 * device, NCCL's kernels too, which may wait for a peer process
		 * that waits for this one (the first step of a pipeline split
		 * over processes grows these buffers while stage links' messages
		 * are queued).  cudaMallocAsync's buffer is for st alone, as every
		 * use of a stage is. */
		const size_t cap = need + need / 4; /* room for a somewhat larger shape */
		cudaError_t e = cudaSuccess;
		if (s->buf)
			e = s->pooled ? cudaFreeAsync(s->buf, st) : cudaStreamSynchronize(st);
		if (e == cudaSuccess && s->buf && !s->pooled)
			e = cudaFree(s->buf);
		s->buf = NULL;
		s->cap = 0;
		s->src = NULL;
		if (e == cudaSuccess) {
			s->pooled = ph_stream_ordered_alloc();
			s->stream = st;
			e = s->pooled ? cudaMallocAsync(&s->buf, cap, st) : cudaMalloc(&s->buf, cap);
		}
		if (e != cudaSuccess) {
			(void)cudaGetLastError();
			s->buf = NULL;
			return ph_fail(err, PH_ENOMEM, "no GPU memory to stage a %dx%d bf16 operand (%.1f MiB): %s", rows,
				       cols, cap / 1048576.0, cudaGetErrorString(e));
		}
		s->cap = cap;
	}
	const int64_t rows_total = (int64_t)nmat * rows;
	if (rows_total > 0 && cols > 0) {
		const int threads = 128;
		int gx = (cols + 2 * threads - 1) / (2 * threads);
		dim3 grid((unsigned)gx, (unsigned)(rows_total < 65535 ? rows_total : 65535));
		k_cast_rows<<<grid, threads, 0, st>>>(src, stride, ld, rows, (__nv_bfloat16 *)s->buf, ldd, rows_total,
						      cols);
		cudaError_t e = cudaGetLastError();
		if (e != cudaSuccess)
			return ph_fail(err, PH_EINTERNAL, "bf16 staging of a %dx%d operand: %s", rows, cols,
				       cudaGetErrorString(e));
	}
	s->src = src;
	s->rows = rows, s->cols = cols, s->ld = ld, s->batch = batch, s->stride = stride;
	s->ld_out = ldd;
	s->stride_out = stride == 0 ? 0 : (int64_t)rows * ldd;
	*out = s->buf;
	*ld_out = s->ld_out;
	*stride_out = s->stride_out;
	return PH_OK;
}

int ph_bf16_stage_holds(const ph_bf16_stage *s, const float *src, int rows, int cols, int ld, int batch,
			int64_t stride)
{
	return s->src && s->src == src && s->rows == rows && s->cols == cols && s->ld == ld && s->batch == batch &&
	       s->stride == stride;
}

int ph_stream_ordered_alloc(void)
{
	int dev = 0, pools = 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return pools != 0;
}

void ph_bf16_stage_free(ph_bf16_stage *s)
{
	if (s->buf && s->pooled) {
		cudaFreeAsync(s->buf, s->stream);
		cudaStreamSynchronize(s->stream);
	} else if (s->buf) {
		cudaFree(s->buf);
	}
	s->buf = NULL;
	s->cap = 0;
	s->src = NULL;
}
