/*
 * conv2d: 2-D convolution (cross-correlation, as in PyTorch), square kernel.
 *
 *   x [B, C, H, W]  ->  y [B, F, OH, OW]
 *   weight [F, C, k, k],  bias [F]
 *   OH = (H + 2p - k) / s + 1,  OW likewise
 *
 * One sample at a time: im2col unrolls the sample into a column matrix
 *   col [C*k*k, OH*OW],  col[(c*k + i)*k + j][oh*OW + ow] = x[c][oh*s - p + i][ow*s - p + j]
 * (zero outside the image), and a single gemm does the rest:
 *   y_s [F, OH*OW] = W [F, C*k*k] . col
 * The column buffer lives in the host's scratch, one sample's worth.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>

typedef struct {
	int64_t filters, kernel, stride, padding;
	int bias;
} conv2d_config;

static const ph_option conv2d_options[] = {
	PH_OPT_INT_(conv2d_config, filters, "filters", NULL, 1, INT_MAX,
		    "output channels"),
	PH_OPT_INT_(conv2d_config, kernel, "kernel", NULL, 1, 4096,
		    "kernel height and width (square)"),
	PH_OPT_INT_(conv2d_config, stride, "stride", "1", 1, 4096, "step between windows"),
	PH_OPT_INT_(conv2d_config, padding, "padding", "0", 0, 4096,
		    "zeros added on every side of the image"),
	PH_OPT_BOOL_(conv2d_config, bias, "bias", "yes", "add a learned bias per filter"),
	PH_OPT_END
};

typedef struct {
	int C, H, W;     /* input */
	int F, k, s, p;
	int OH, OW;      /* output */
	int ckk;         /* rows of the column matrix: C*k*k */
	int ohw;         /* columns of the column matrix: OH*OW */
	int bias;
	int max_batch;
} conv2d_state;

static int conv2d_create(const void *config, const ph_shape *in, int max_batch,
			 void **state, ph_err *err)
{
	const conv2d_config *cfg = config;
	if (in->ndim != 3)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: input has %d dimension%s; need 3 ([channels, height, width]) "
			       "per sample", in->ndim, in->ndim == 1 ? "" : "s");
	for (int i = 0; i < 3; i++)
		if (in->d[i] < 1 || in->d[i] > INT_MAX)
			return ph_fail(err, PH_EINVAL, "conv2d: input dimension %d is %lld; need 1 to %d",
				       i, (long long)in->d[i], INT_MAX);
	if (cfg->filters < 1 || cfg->filters > INT_MAX || cfg->kernel < 1 ||
	    cfg->stride < 1 || cfg->padding < 0 || cfg->kernel > 4096 ||
	    cfg->stride > 4096 || cfg->padding > 4096)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: filters %lld, kernel %lld, stride %lld, padding %lld out of range",
			       (long long)cfg->filters, (long long)cfg->kernel,
			       (long long)cfg->stride, (long long)cfg->padding);
	int64_t C = in->d[0], H = in->d[1], W = in->d[2];
	int64_t k = cfg->kernel, st = cfg->stride, p = cfg->padding;
	if (H + 2 * p < k || W + 2 * p < k)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: kernel %lld larger than padded input %lldx%lld; "
			       "lower kernel or add padding",
			       (long long)k, (long long)(H + 2 * p), (long long)(W + 2 * p));
	int64_t OH = (H + 2 * p - k) / st + 1, OW = (W + 2 * p - k) / st + 1;
	int64_t ckk = C * k * k, ohw = OH * OW;
	/* CBLAS takes int dimensions; the column matrix's sides must fit. */
	if (ckk > INT_MAX || ohw > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: column matrix %lld x %lld exceeds BLAS int sizes; "
			       "use fewer channels or a smaller image", (long long)ckk, (long long)ohw);

	conv2d_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "conv2d: out of memory");
	*s = (conv2d_state){ .C = (int)C, .H = (int)H, .W = (int)W, .F = (int)cfg->filters,
			     .k = (int)k, .s = (int)st, .p = (int)p, .OH = (int)OH, .OW = (int)OW,
			     .ckk = (int)ckk, .ohw = (int)ohw, .bias = cfg->bias,
			     .max_batch = max_batch };
	*state = s;
	return PH_OK;
}

static void conv2d_destroy(void *state)
{
	free(state);
}

static int conv2d_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const conv2d_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 3, { s->F, s->OH, s->OW } };
	double mm = 2.0 * s->F * (double)s->ckk * s->ohw;
	double b = s->bias ? (double)s->F * s->ohw : 0;
	m->fwd_flops = mm + b;
	m->bwd_flops = 2 * mm + b;  /* dW and dx gemms; im2col/col2im are moves */
	/* PyTorch's default bound for both tensors: 1/sqrt(fan_in). */
	float bound = 1.0f / sqrtf((float)s->ckk);
	ph_param_desc *w = &m->params[m->nparams++];
	strcpy(w->name, "weight");
	w->shape = (ph_shape){ 4, { s->F, s->C, s->k, s->k } };
	w->init = PH_INIT_UNIFORM;
	w->init_arg = bound;
	if (s->bias) {
		ph_param_desc *bd = &m->params[m->nparams++];
		strcpy(bd->name, "bias");
		bd->shape = (ph_shape){ 1, { s->F } };
		bd->init = PH_INIT_UNIFORM;
		bd->init_arg = bound;
		bd->no_decay = 1;
	}
	m->scratch_bytes = (size_t)s->ckk * (size_t)s->ohw * sizeof(float);
	return PH_OK;
}

/* x [C, H, W] -> col [C*k*k, OH*OW]; padding reads as zero. */
static void im2col(const conv2d_state *s, const float *x, float *col)
{
	const int k = s->k, OH = s->OH, OW = s->OW;
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				float *row = col + (size_t)((c * k + i) * k + j) * s->ohw;
				for (int oh = 0; oh < OH; oh++) {
					int h = oh * s->s - s->p + i;
					float *out = row + (size_t)oh * OW;
					if (h < 0 || h >= s->H) {
						memset(out, 0, (size_t)OW * sizeof *out);
						continue;
					}
					const float *xr = x + ((size_t)c * s->H + h) * s->W;
					for (int ow = 0; ow < OW; ow++) {
						int w = ow * s->s - s->p + j;
						out[ow] = (w >= 0 && w < s->W) ? xr[w] : 0.0f;
					}
				}
			}
}

/* The adjoint of im2col: dx [C, H, W] += scatter of dcol [C*k*k, OH*OW].
 * Overlapping windows hit the same pixel; the fixed loop order keeps the
 * sums bitwise reproducible. */
static void col2im_add(const conv2d_state *s, const float *dcol, float *dx)
{
	const int k = s->k, OH = s->OH, OW = s->OW;
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				const float *row = dcol + (size_t)((c * k + i) * k + j) * s->ohw;
				for (int oh = 0; oh < OH; oh++) {
					int h = oh * s->s - s->p + i;
					if (h < 0 || h >= s->H)
						continue;
					const float *in = row + (size_t)oh * OW;
					float *xr = dx + ((size_t)c * s->H + h) * s->W;
					for (int ow = 0; ow < OW; ow++) {
						int w = ow * s->s - s->p + j;
						if (w >= 0 && w < s->W)
							xr[w] += in[ow];
					}
				}
			}
}

static int check_call(const conv2d_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "conv2d: batch %d outside [0, %d] given at create",
			       ctx->batch, s->max_batch);
	if (!ctx->scratch && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "conv2d: no scratch buffer (meta asked for %zu bytes)",
			       (size_t)s->ckk * (size_t)s->ohw * sizeof(float));
	return PH_OK;
}

/* Per sample: col = im2col(x_s); y_s [F, OH*OW] = W [F, ckk] . col (+ b) */
static int conv2d_forward(void *state, const ph_ctx *ctx, float *const *params,
			  const float *x, float *y, ph_err *err)
{
	const conv2d_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->F * s->ohw;
	float *col = ctx->scratch;
	for (int b = 0; b < ctx->batch; b++) {
		const float *xs = x + b * in_n;
		float *ys = y + b * out_n;
		im2col(s, xs, col);
		float beta = 0.0f;
		if (s->bias) {
			for (int f = 0; f < s->F; f++)
				for (int i = 0; i < s->ohw; i++)
					ys[(size_t)f * s->ohw + i] = params[1][f];
			beta = 1.0f;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->F, s->ohw, s->ckk,
			    1.0f, params[0], s->ckk, col, s->ohw, beta, ys, s->ohw);
	}
	return PH_OK;
}

/*
 * Per sample, in sample order (so gradient sums are reproducible):
 *   col  = im2col(x_s)                          (recomputed, not saved)
 *   dW  += dy_s [F, OH*OW] . col^T [OH*OW, ckk]
 *   db  += row sums of dy_s
 *   dcol = W^T [ckk, F] . dy_s                  (reuses the column buffer)
 *   dx_s = col2im(dcol)
 */
static int conv2d_backward(void *state, const ph_ctx *ctx, float *const *params,
			   float *const *grads, const float *x, const float *y,
			   const float *dy, float *dx, ph_err *err)
{
	const conv2d_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->F * s->ohw;
	float *col = ctx->scratch;
	for (int b = 0; b < ctx->batch; b++) {
		const float *dys = dy + b * out_n;
		im2col(s, x + b * in_n, col);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->F, s->ckk, s->ohw,
			    1.0f, dys, s->ohw, col, s->ohw, 1.0f, grads[0], s->ckk);
		if (s->bias)
			for (int f = 0; f < s->F; f++) {
				float acc = 0.0f;
				for (int i = 0; i < s->ohw; i++)
					acc += dys[(size_t)f * s->ohw + i];
				grads[1][f] += acc;
			}
		if (!dx)
			continue;
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->ckk, s->ohw, s->F,
			    1.0f, params[0], s->ckk, dys, s->ohw, 0.0f, col, s->ohw);
		float *dxs = dx + b * in_n;
		memset(dxs, 0, in_n * sizeof *dxs);
		col2im_add(s, col, dxs);
	}
	return PH_OK;
}

static const ph_layer_ops conv2d_ops = {
	.head = PH_HEAD(ph_layer_ops, "conv2d",
			"2-D convolution over [channels, height, width] (im2col + gemm)",
			conv2d_options, conv2d_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = conv2d_create,
	.destroy = conv2d_destroy,
	.meta = conv2d_meta,
	.forward = conv2d_forward,
	.backward = conv2d_backward,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const conv2d_layers[] = { &conv2d_ops, NULL };
PH_PLUGIN(conv2d_layers, NULL, NULL)
