/* SPDX-License-Identifier: MIT */
/* Measured layer costs for [partition] cost = profile, with a small on-disk
 * cache (see profile.h for the method, the key and the file format). */
#define _GNU_SOURCE /* dladdr */
#include "build-config.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#include <xxhash.h>

#include "layer_call.h"
#include "memcheck.h"
#include "profile.h"
#include "readfile.h"

#define PROFILE_MAGIC "pipehost-profile 1"

/* ------------------------------------------------------------------ */
/* Key                                                                  */

typedef struct {
	char *buf;
	size_t len, used;
	uint64_t h;
} keytext;

static void kt_add(keytext *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kt_add(keytext *k, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof tmp)
		n = (int)sizeof tmp - 1;
	for (int i = 0; i < n; i++) { /* FNV-1a, 64 bit */
		k->h ^= (unsigned char)tmp[i];
		k->h *= 0x100000001b3ull;
	}
	if (k->buf && k->used < k->len) {
		size_t room = k->len - k->used;
		size_t c = (size_t)n < room - 1 ? (size_t)n : room - 1;
		memcpy(k->buf + k->used, tmp, c);
		k->used += c;
		k->buf[k->used] = 0;
	}
}

static void kt_shape(keytext *k, const ph_shape *s)
{
	kt_add(k, "[");
	for (int i = 0; i < s->ndim; i++)
		kt_add(k, "%s%lld", i ? "," : "", (long long)s->d[i]);
	kt_add(k, "]");
}

/* The bytes of the file that holds code at `addr` (a layer's plugin), as
 * an XXH3-64: a plugin rebuilt (another kernel, another -O) times
 * differently under the same name and shapes.  0 when unreadable. */
static uint64_t code_digest(const void *addr)
{
	/* one read of each file a process: a model of 48 blocks keys the same
	 * plugin (a CUDA one: megabytes of fatbin) 48 times */
	static struct {
		void *base;
		uint64_t h;
	} seen[64];
	static int nseen;
	Dl_info info;
	if (!dladdr(addr, &info) || !info.dli_fname)
		return 0;
	for (int i = 0; i < nseen; i++)
		if (seen[i].base == info.dli_fbase)
			return seen[i].h;
	int fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	XXH3_state_t *st = XXH3_createState();
	uint64_t h = 0;
	if (st && XXH3_64bits_reset(st) == XXH_OK) {
		char buf[65536];
		ssize_t n;
		while ((n = read(fd, buf, sizeof buf)) > 0)
			XXH3_64bits_update(st, buf, (size_t)n);
		h = n == 0 ? XXH3_64bits_digest(st) : 0;
	}
	XXH3_freeState(st);
	close(fd);
	if (h && nseen < (int)(sizeof seen / sizeof *seen))
		seen[nseen].base = info.dli_fbase, seen[nseen++].h = h;
	return h;
}

/* A layer's options as its plugin holds them: an option that leaves the
 * meta alone (a dropout rate, a second expert's rule) still moves the
 * time (a rate of 0 draws no mask). */
static void kt_options(keytext *k, const ph_layer *l)
{
	const ph_option *o = l->ops->head.options;
	const char *cfg = l->cfg ? (const char *)l->cfg->config : NULL;
	if (!o || !cfg)
		return;
	for (; o->name; o++) {
		const char *v = cfg + o->offset;
		kt_add(k, " %s=", o->name);
		switch (o->type) {
		case PH_OPT_INT: kt_add(k, "%lld", (long long)*(const int64_t *)v); break;
		case PH_OPT_FLOAT: kt_add(k, "%.17g", *(const double *)v); break;
		case PH_OPT_BOOL:
		case PH_OPT_CHOICE: kt_add(k, "%d", *(const int *)v); break;
		case PH_OPT_STRING: kt_add(k, "%.*s", PH_STR_MAX, v); break;
		case PH_OPT_INTLIST: {
			const ph_intlist *il = (const ph_intlist *)v;
			for (int i = 0; i < il->n && i < PH_INTLIST_MAX; i++)
				kt_add(k, "%s%lld", i ? "," : "", (long long)il->v[i]);
			break;
		}
		}
	}
}

uint64_t ph_profile_key(const ph_model *m, int threads, const char *device, char *text, size_t len)
{
	keytext k = { text, len, 0, 0xcbf29ce484222325ull };
	if (text && len)
		text[0] = 0;
	/* method 3: mapped buffers, caches as in a step (evict_caches), the
	 * run's samples, CPU time with one thread; a file measured another
	 * way is a miss */
	kt_add(&k, "%s\nmethod 3\nversion %s\ndevice %s\nthreads %d\nmicro_batch %d\nlayers %d\n", PROFILE_MAGIC,
	       PACKAGE_VERSION, device, threads, m->max_batch, m->n);
	for (int i = 0; i < m->n; i++) {
		const ph_layer *l = &m->layers[i];
		const ph_layer_meta *mt = &l->meta;
		kt_add(&k, "%s code %016" PRIx64, l->ops->head.name, code_digest((const void *)l->ops->forward));
		kt_options(&k, l);
		kt_add(&k, " ");
		kt_shape(&k, &l->in);
		kt_add(&k, " -> ");
		kt_shape(&k, &mt->out);
		kt_add(&k, " params");
		for (int p = 0; p < mt->nparams; p++) {
			kt_add(&k, " ");
			kt_shape(&k, &mt->params[p].shape);
		}
		kt_add(&k, " flops %.17g %.17g saved %zu scratch %zu targets %d\n", mt->fwd_flops, mt->bwd_flops,
		       mt->saved_bytes, mt->scratch_bytes, mt->targets_per_sample);
	}
	return k.h;
}

/* "cpu Intel(R) Xeon(R) ..." from /proc/cpuinfo, or just "cpu". */
static void cpu_device(char *buf, size_t len)
{
	snprintf(buf, len, "cpu");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "model name", 10) == 0) {
			char *v = strchr(line, ':');
			if (v) {
				v++;
				while (*v == ' ' || *v == '\t')
					v++;
				v[strcspn(v, "\n")] = 0;
				snprintf(buf, len, "cpu %s", v);
			}
			break;
		}
	}
	fclose(f);
}

/* The device as the key knows it: on the CPU, the BLAS's own words too
 * (OpenBLAS picks its kernels per CPU; OPENBLAS_CORETYPE or another build
 * picks others, and a layer's products time differently). */
static void key_device(const char *device, int gpu, char *buf, size_t len)
{
	if (gpu)
		snprintf(buf, len, "%s", device);
	else
		snprintf(buf, len, "%s blas %.80s %.100s", device, openblas_get_corename(), openblas_get_config());
}

/* ------------------------------------------------------------------ */
/* Cache file                                                           */

int ph_profile_cache_path(const char *cache_dir, uint64_t key, char *buf, size_t len, ph_err *err)
{
	char dir[4096];
	if (cache_dir && cache_dir[0]) {
		snprintf(dir, sizeof dir, "%s", cache_dir);
	} else {
		const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
		if (xdg && xdg[0] == '/')
			snprintf(dir, sizeof dir, "%s/pipehost", xdg);
		else if (home && home[0])
			snprintf(dir, sizeof dir, "%s/.cache/pipehost", home);
		else
			return ph_fail(err, PH_EINVAL, "no cache directory: HOME and XDG_CACHE_HOME are unset; "
				       "set [partition] profile_cache");
	}
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		dir[--n] = 0;
	if ((size_t)snprintf(buf, len, "%s/profile-%016" PRIx64 ".txt", dir, key) >= len)
		return ph_fail(err, PH_EINVAL, "cache directory name too long: %s", dir);
	return PH_OK;
}

/* mkdir -p for the directory part of path. */
static int make_parents(const char *path, ph_err *err)
{
	char d[4096];
	snprintf(d, sizeof d, "%s", path);
	char *slash = strrchr(d, '/');
	if (!slash || slash == d)
		return PH_OK;
	*slash = 0;
	for (char *p = d + 1; ; p++) {
		if (*p == '/' || *p == 0) {
			char c = *p;
			*p = 0;
			if (mkdir(d, 0755) && errno != EEXIST)
				return ph_fail(err, PH_EIO, "cannot create %s: %s", d, strerror(errno));
			*p = c;
			if (!c)
				break;
		}
	}
	struct stat st;
	if (stat(d, &st) || !S_ISDIR(st.st_mode))
		return ph_fail(err, PH_EIO, "%s is not a directory", d);
	return PH_OK;
}

int ph_profile_cache_write(const char *path, uint64_t key, const ph_model *m, const double *fwd_s,
			   const double *bwd_s, ph_err *err)
{
	int rc = make_parents(path, err);
	if (rc)
		return rc;
	char tmp[4200];
	snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f)
		return ph_fail(err, PH_EIO, "cannot write %s: %s", tmp, strerror(errno));
	fprintf(f, "%s\n# measured by pipehost %s: seconds per micro-batch of %d on one rank\n", PROFILE_MAGIC,
		PACKAGE_VERSION, m->max_batch);
	fprintf(f, "key %016" PRIx64 "\nlayers %d\n", key, m->n);
	for (int i = 0; i < m->n; i++)
		fprintf(f, "layer %d %s %.9e %.9e %s\n", i, m->layers[i].ops->head.name, fwd_s[i], bwd_s[i],
			m->layers[i].cfg ? m->layers[i].cfg->name : "?");
	int bad = ferror(f);
	if (fclose(f) || bad) {
		unlink(tmp);
		return ph_fail(err, PH_EIO, "cannot write %s", tmp);
	}
	if (rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return ph_fail(err, PH_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
	}
	return PH_OK;
}

int ph_profile_cache_read(const char *path, uint64_t key, const ph_model *m, double *fwd_s, double *bwd_s,
			  ph_err *why)
{
	if (why)
		why->msg[0] = 0;
	struct stat sb;
	if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a FIFO would block the fopen */
		ph_fail(why, PH_EIO, "cannot read %s: it is %s, not a regular file", path, ph_file_kind(sb.st_mode));
		return 0;
	}
	FILE *f = fopen(path, "r");
	if (!f) {
		if (errno != ENOENT)
			ph_fail(why, PH_EIO, "cannot read %s: %s", path, strerror(errno));
		return 0;
	}
	char line[1024];
	int state = 0, n = -1, next = 0, hit = 0, lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		line[strcspn(line, "\n")] = 0;
		if (line[0] == '#' || line[0] == 0)
			continue;
		if (state == 0) {
			if (strcmp(line, PROFILE_MAGIC)) {
				ph_fail(why, PH_EINVAL, "%s:%d: not a version 1 profile file", path, lineno);
				goto out;
			}
			state = 1;
		} else if (state == 1) {
			uint64_t k;
			if (sscanf(line, "key %" SCNx64, &k) != 1) {
				ph_fail(why, PH_EINVAL, "%s:%d: expected key", path, lineno);
				goto out;
			}
			if (k != key) {
				ph_fail(why, PH_EINVAL, "%s holds key %016" PRIx64 ", not %016" PRIx64, path, k, key);
				goto out;
			}
			state = 2;
		} else if (state == 2) {
			if (sscanf(line, "layers %d", &n) != 1 || n != m->n) {
				ph_fail(why, PH_EINVAL, "%s:%d: layer count differs from the model's %d", path, lineno, m->n);
				goto out;
			}
			state = 3;
		} else {
			int idx, used = 0;
			char type[256];
			double a, b;
			/* the layer's name is for the reader: a renamed layer times the
			 * same (names are not in the key, so a check of them here
			 * once made two INIs rewrite each other's file) */
			if (next >= n || sscanf(line, "layer %d %255s %lf %lf %n", &idx, type, &a, &b, &used) != 4 ||
			    idx != next || strcmp(type, m->layers[idx].ops->head.name)) {
				ph_fail(why, PH_EINVAL, "%s:%d: does not describe layer %d of this model", path, lineno, next);
				goto out;
			}
			/* a time no measurement gives: negative, NaN, infinite or
			 * beyond PH_PROFILE_MAX_S (see profile.h) */
			if (!(a >= 0 && a <= PH_PROFILE_MAX_S) || !(b >= 0 && b <= PH_PROFILE_MAX_S)) {
				ph_fail(why, PH_EINVAL, "%s:%d: layer %d (%s): %s time %g s is not a measurement "
					"(0 to %g s)", path, lineno, next, m->layers[idx].cfg ? m->layers[idx].cfg->name : type,
					!(a >= 0 && a <= PH_PROFILE_MAX_S) ? "forward" : "backward",
					!(a >= 0 && a <= PH_PROFILE_MAX_S) ? a : b, PH_PROFILE_MAX_S);
				goto out;
			}
			fwd_s[idx] = a;
			bwd_s[idx] = b;
			next++;
		}
	}
	if (state == 3 && next == n) {
		/* every time 0 is no measurement (each call takes some time),
		 * and would leave the partitioners nothing to balance */
		double total = 0;
		for (int i = 0; i < n; i++)
			total += fwd_s[i] + bwd_s[i];
		if (total > 0)
			hit = 1;
		else
			ph_fail(why, PH_EINVAL, "%s: every layer's time is 0, which no measurement gives", path);
	} else {
		ph_fail(why, PH_EINVAL, "%s: truncated after %d of %d layers", path, next, n < 0 ? 0 : n);
	}
out:
	fclose(f);
	return hit;
}

/* ------------------------------------------------------------------ */
/* Measuring                                                            */

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The clock a layer is timed by.  With one BLAS thread on the CPU all of a
 * layer's work runs on this thread, so its CPU time is the layer's cost
 * without the time other processes held the core (a busy machine would
 * otherwise skew a layer at random, and a cut with it); in training that
 * layer runs as long on a core of its own.  With more BLAS threads the
 * other threads' work would be missed: wall time, as on a GPU. */
static int cpu_clock;

static double clock_s(void)
{
	if (!cpu_clock)
		return now_s();
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t xs_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Uniform in [lo, hi). */
static void fill(float *p, size_t n, float lo, float hi, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull | 1;
	for (size_t i = 0; i < n; i++)
		p[i] = lo + (hi - lo) * (float)(xs_next(&s) >> 40) * (1.0f / 16777216.0f);
}

static void init_param(float *p, size_t n, const ph_param_desc *d, uint64_t seed)
{
	switch (d->init) {
	case PH_INIT_ZEROS: memset(p, 0, n * sizeof *p); break;
	case PH_INIT_ONES:
		for (size_t i = 0; i < n; i++)
			p[i] = 1;
		break;
	case PH_INIT_UNIFORM: fill(p, n, -d->init_arg, d->init_arg, seed); break;
	case PH_INIT_NORMAL: /* same spread: U(-sqrt3 s, sqrt3 s) has standard deviation s */
		fill(p, n, -1.7320508f * d->init_arg, 1.7320508f * d->init_arg, seed);
		break;
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Where a layer runs while it is timed: the CPU (dev NULL), or one GPU
 * rank state of the CUDA backend. */
typedef struct {
	const ph_device_ops *dev;
	void *rs;
} place;

/* Zeroed memory of `place` (host or device). */
static void *p_alloc(const place *pl, size_t n)
{
	if (!pl->dev)
		return calloc(n ? n : 1, 1);
	void *p = NULL;
	ph_err e = { { 0 } };
	return pl->dev->alloc(pl->rs, n ? n : 1, &p, &e) == PH_OK ? p : NULL;
}

static void p_free(const place *pl, void *p)
{
	if (!p)
		return;
	if (pl->dev)
		pl->dev->free(pl->rs, p);
	else
		free(p);
}

static int p_upload(const place *pl, void *dst, const void *src, size_t bytes, ph_err *err)
{
	if (!pl->dev) {
		memcpy(dst, src, bytes);
		return PH_OK;
	}
	return pl->dev->copy(pl->rs, dst, src, bytes, PH_COPY_H2D, err);
}

/* A GPU queues work and returns: wait for it before reading the clock. */
static int p_wait(const place *pl, ph_err *err)
{
	return pl->dev ? pl->dev->sync(pl->rs, err) : PH_OK;
}

/* Buffers of one layer, in the place's memory. */
typedef struct {
	float *params[PH_MAX_PARAMS], *grads[PH_MAX_PARAMS];
	float *y, *dy, *dx;
	void *saved, *scratch;
	int32_t *targets;
} bufs;

static void free_bufs(const place *pl, bufs *b)
{
	for (int p = 0; p < PH_MAX_PARAMS; p++) {
		p_free(pl, b->params[p]);
		p_free(pl, b->grads[p]);
	}
	p_free(pl, b->y);
	p_free(pl, b->dy);
	p_free(pl, b->dx);
	p_free(pl, b->saved);
	p_free(pl, b->scratch);
	p_free(pl, b->targets);
	memset(b, 0, sizeof *b);
}

/* n floats of host values h into a fresh buffer of the place. */
static float *p_floats(const place *pl, const float *h, size_t n, ph_err *err)
{
	float *d = p_alloc(pl, n * sizeof *d);
	if (d && n && p_upload(pl, d, h, n * sizeof *d, err) != PH_OK) {
		p_free(pl, d);
		return NULL;
	}
	return d;
}

/* The caches as a training step leaves them for a layer's call.  In a
 * step, a layer's weights, saved state and output slots were last touched
 * a whole round of micro-batches ago, so they are out of the caches, while
 * its input (forward) or output gradient (backward) was just written by
 * its neighbour.  Timed on warm buffers, memory-bound layers (relu,
 * pooling, flatten) read 2-3x fast against the same calls inside steps
 * (bench/profile-vs-step.sh), and the cut leans on them.  So before each
 * timed call on the CPU: write a buffer twice the last-level cache (the
 * previous call's bytes leave), then read the fresh operand back in. */
static float *evict_buf;
static size_t evict_n;

/* How much each eviction writes: twice the last-level cache, within 8 and
 * 256 MiB. */
static size_t evict_bytes(void)
{
	long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
	size_t bytes = l3 > 0 ? 2 * (size_t)l3 : (size_t)64 << 20;
	if (bytes < ((size_t)8 << 20))
		bytes = (size_t)8 << 20;
	if (bytes > ((size_t)256 << 20))
		bytes = (size_t)256 << 20;
	return bytes;
}

static void evict_caches(void)
{
	if (!evict_buf) {
		size_t bytes = evict_bytes();
		evict_buf = malloc(bytes);
		if (!evict_buf)
			return; /* the timing is only less faithful */
		evict_n = bytes / sizeof(float);
	}
	for (size_t i = 0; i < evict_n; i += 16) /* one store a 64-byte line */
		evict_buf[i] = (float)i;
	__asm__ __volatile__("" ::"r"(evict_buf) : "memory");
}

/* Measuring is done: the buffer (up to 256 MiB, written) is not training's
 * to carry. */
static void evict_release(void)
{
	free(evict_buf);
	evict_buf = NULL;
	evict_n = 0;
}

/* What one eviction takes here: the least of three, after one that
 * faults the buffer's pages in, in this thread's CPU time (a wall clock
 * counted other processes' turns: under make -j16 on 2 cores a 9-layer
 * model's estimate grew to 14 s and cost = auto stopped measuring).
 * cost = auto's estimate adds it to every timed call.  The buffer is
 * released again. */
static double evict_seconds(void)
{
	evict_caches();
	double best = 1e30;
	for (int k = 0; k < 3; k++) {
		struct timespec a, b;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
		evict_caches();
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
		double t = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
		if (t < best)
			best = t;
	}
	evict_release();
	return best > 0 && best < 1e30 ? best : 0;
}

/* Read n floats into the caches, as the neighbour's write leaves them. */
static void touch(const float *p, size_t n)
{
	float acc = 0;
	for (size_t i = 0; i < n; i += 16)
		acc += p[i];
	__asm__ __volatile__("" ::"r"(acc));
}

/* Bytes measure() allocates for a layer besides its parameters: y, dy,
 * dx, saved and scratch at micro-batch B. */
static double layer_buffer_bytes(const ph_layer *l, size_t B, size_t scratch)
{
	double in_n = (double)ph_shape_numel(&l->in) * B, out_n = (double)ph_shape_numel(&l->meta.out) * B;
	return (2 * out_n + in_n) * sizeof(float) + (double)l->meta.saved_bytes * B + (double)scratch;
}

/* Bytes measure() allocates for layer i: its buffers at micro-batch B
 * (on the CPU, its host scratch) and its parameters and gradients. */
static double layer_bytes(const ph_layer *l, size_t B)
{
	double b = layer_buffer_bytes(l, B, l->meta.scratch_bytes);
	for (int p = 0; p < l->meta.nparams; p++)
		b += 2.0 * sizeof(float) * (double)ph_shape_numel(&l->meta.params[p].shape);
	return b;
}

/* The most host memory measuring m on the CPU holds at once: measure_all()
 * keeps the model's input and the layer before's buffers (its output is
 * this layer's input) while it measures a layer.  *at: that layer. */
static double measure_need(const ph_model *m, int *at)
{
	size_t B = (size_t)m->max_batch;
	double x = (double)ph_shape_numel(&m->input) * B * sizeof(float), need = 0, prev = 0;
	*at = 0;
	for (int i = 0; i < m->n; i++) {
		double cur = layer_bytes(&m->layers[i], B);
		if (x + prev + cur > need)
			need = x + prev + cur, *at = i;
		prev = cur;
	}
	return need;
}

/* Time layer i; x is its input (batch B, in the place's memory), y comes
 * back in b->y. */
static int measure(const place *pl, const ph_model *m, int i, const float *x, bufs *b, double *fwd, double *bwd,
		   int *reps, ph_err *err)
{
	const ph_layer *l = &m->layers[i];
	const ph_layer_meta *mt = &l->meta;
	size_t B = (size_t)m->max_batch;
	size_t in_n = (size_t)ph_shape_numel(&l->in) * B, out_n = (size_t)ph_shape_numel(&mt->out) * B;
	int is_loss = (l->ops->flags & PH_LAYER_LOSS) != 0;
	const char *name = l->cfg ? l->cfg->name : "?";
	/* on a GPU a layer may ask for another amount of scratch (ABI 1.2), as
	 * the engine gives it */
	size_t scratch = pl->dev && mt->device_scratch_bytes ? mt->device_scratch_bytes : mt->scratch_bytes;
	for (int p = 0; p < mt->nparams; p++) {
		size_t n = (size_t)ph_shape_numel(&mt->params[p].shape);
		float *h = malloc((n ? n : 1) * sizeof *h);
		if (!h)
			return ph_fail(err, PH_ENOMEM, "profile: out of memory for the parameters of layer %s (%.1f MiB asked)",
				       name, (double)n * sizeof *h / 1048576.0);
		init_param(h, n, &mt->params[p], (uint64_t)i * 16 + (uint64_t)p + 1);
		ph_err e2 = { { 0 } };
		b->params[p] = p_floats(pl, h, n, &e2);
		free(h);
		b->grads[p] = p_alloc(pl, n * sizeof(float));
		if (!b->params[p] || !b->grads[p])
			return ph_fail(err, PH_ENOMEM, "profile: out of memory for the parameters of layer %s (%.1f MiB asked)%s%s",
				       name, (double)n * sizeof(float) / 1048576.0, e2.msg[0] ? ": " : "", e2.msg);
		/* as the engine registers weights: under bf16 the products read
		 * a bf16 copy made once, which the timing should see too */
		int rc;
		if (pl->dev && pl->dev->param_block && n &&
		    (rc = pl->dev->param_block(pl->rs, b->params[p], (int64_t)n, err)))
			return rc;
	}
	b->y = p_alloc(pl, out_n * sizeof(float));
	b->dx = p_alloc(pl, in_n * sizeof(float));
	b->saved = p_alloc(pl, mt->saved_bytes * B);
	b->scratch = p_alloc(pl, scratch);
	if (is_loss) {
		b->targets = p_alloc(pl, B * (size_t)(mt->targets_per_sample > 0 ? mt->targets_per_sample : 1) *
						 sizeof(int32_t));
	} else {
		float *h = malloc((out_n ? out_n : 1) * sizeof *h);
		if (h) {
			fill(h, out_n, -1e-3f, 1e-3f, (uint64_t)i + 12345);
			ph_err e2 = { { 0 } };
			b->dy = p_floats(pl, h, out_n, &e2);
			free(h);
		}
	}
	if (!b->y || !b->dx || !b->saved || !b->scratch || (is_loss ? !b->targets : !b->dy))
		return ph_fail(err, PH_ENOMEM, "profile: out of memory for the %.1f MiB of activations and buffers of layer %s "
			       "(micro-batch %d)", layer_buffer_bytes(l, B, scratch) / 1048576.0, name, m->max_batch);
	/* Warm buffers: every page of the outputs and the layer's own bytes
	 * touched before the first call (calloc's pages are mapped on first
	 * write), then the warm-up calls below bring them into the caches. */
	if (!pl->dev) {
		memset(b->y, 0, out_n * sizeof(float));
		memset(b->dx, 0, in_n * sizeof(float));
		memset(b->saved, 0, mt->saved_bytes * B);
		memset(b->scratch, 0, scratch);
	}
	int rc = p_wait(pl, err);
	if (rc)
		return rc;

	ph_ctx ctx;
	memset(&ctx, 0, sizeof ctx);
	ctx.batch = m->max_batch;
	ctx.training = 1;
	ctx.seed = 1;
	ctx.layer = (uint64_t)i;
	ctx.scratch = b->scratch;
	ctx.saved = b->saved;
	ctx.device = PH_DEV_CPU;
	ctx.group = ph_group_solo();
	if (pl->dev)
		pl->dev->fill_ctx(pl->rs, &ctx);
	if (is_loss) {
		ctx.targets = b->targets;
		ctx.loss_scale = (float)(1.0 / ((double)B * (mt->targets_per_sample > 0 ? mt->targets_per_sample : 1)));
	}
	double tf[PH_PROFILE_REPEATS], tb[PH_PROFILE_REPEATS];
	int warm = PH_PROFILE_WARMUP, n = 0;
	double spent = 0;
	for (int it = 0; n < PH_PROFILE_REPEATS; it++) {
		ph_err e2 = { { 0 } };
		ctx.step = (uint64_t)it;
		if (!pl->dev) {
			evict_caches();
			touch(x, in_n);
		}
		double t0 = clock_s();
		rc = ph_layer_forward(l->ops, l->state, m->max_batch, &ctx, b->params, x, b->y, &e2);
		if (!rc)
			rc = p_wait(pl, &e2);
		if (rc)
			return ph_fail(err, rc, "profile: layer %s (%s) forward: %s", name, l->ops->head.name, e2.msg);
		double tfwd = clock_s() - t0;
		if (!pl->dev) {
			evict_caches();
			if (b->dy)
				touch(b->dy, out_n);
		}
		double t1 = clock_s();
		/* the model's first layer owes no input gradient: the engine
		 * passes dx = NULL and conv2d, say, skips that product */
		rc = ph_layer_backward(l->ops, l->state, m->max_batch, &ctx, b->params, b->grads, x, b->y, b->dy,
				       i == 0 ? NULL : b->dx, &e2);
		if (!rc)
			rc = p_wait(pl, &e2);
		if (rc)
			return ph_fail(err, rc, "profile: layer %s (%s) backward: %s", name, l->ops->head.name, e2.msg);
		double t2 = clock_s();
		if (it < warm) {
			/* a slow layer needs less warming */
			if (tfwd + (t2 - t1) > PH_PROFILE_LAYER_BUDGET_S / 4)
				warm = it + 1;
			continue;
		}
		tf[n] = tfwd;
		tb[n] = t2 - t1;
		n++;
		spent += tfwd + (t2 - t1);
		if (spent > PH_PROFILE_LAYER_BUDGET_S && (n >= 3 || tfwd + (t2 - t1) > PH_PROFILE_LAYER_BUDGET_S))
			break;
	}
	*fwd = median(tf, n);
	*bwd = median(tb, n);
	*reps = n;
	/* The forward output must be the one of the input, for the next layer:
	 * backward does not touch y (the ABI gives it as const). */
	return PH_OK;
}

static void print_table(FILE *out, const ph_model *m, const double *fwd_s, const double *bwd_s)
{
	double tf = 0, tb = 0;
	fprintf(out, "  %-5s %-20s %-16s %10s %10s\n", "layer", "name", "type", "fwd ms", "bwd ms");
	for (int i = 0; i < m->n; i++) {
		const ph_layer *l = &m->layers[i];
		fprintf(out, "  %-5d %-20s %-16s %10.3f %10.3f\n", i, l->cfg ? l->cfg->name : "?", l->ops->head.name,
			1e3 * fwd_s[i], 1e3 * bwd_s[i]);
		tf += fwd_s[i];
		tb += bwd_s[i];
	}
	fprintf(out, "  %-5s %-20s %-16s %10.3f %10.3f\n", "", "total", "", 1e3 * tf, 1e3 * tb);
}

/* Measure every layer in place pl (the GPU's rank state already open).
 * x0: a micro-batch of the run's own training samples, or NULL. */
static int measure_all(const place *pl, const ph_model *m, const float *x0, double *fwd_s, double *bwd_s,
		       ph_err *err)
{
	int rc = PH_OK;
	size_t in_n = (size_t)ph_shape_numel(&m->input) * (size_t)m->max_batch;
	float *h = malloc((in_n ? in_n : 1) * sizeof *h);
	if (!h)
		return ph_fail(err, PH_ENOMEM, "profile: out of memory for the input");
	if (x0) {
		/* Real samples: kernels that branch on their data (ReLU, max
		 * pooling) run as fast as in training only on data like the
		 * training data; random signs cost them a branch miss an
		 * element (relu1 of etc/fashion-mnist.ini: 10x). */
		memcpy(h, x0, in_n * sizeof *h);
	} else {
		/* Input: 0s and 1s, valid both as pixels and as token ids. */
		fill(h, in_n, 0.0f, 1.0f, 7);
		for (size_t k = 0; k < in_n; k++)
			h[k] = h[k] < 0.5f ? 0.0f : 1.0f;
	}
	ph_err e2 = { { 0 } };
	float *x = p_floats(pl, h, in_n, &e2);
	free(h);
	if (!x)
		return ph_fail(err, PH_ENOMEM, "profile: no memory for the input%s%s", e2.msg[0] ? ": " : "", e2.msg);
	bufs prev, cur;
	memset(&prev, 0, sizeof prev);
	memset(&cur, 0, sizeof cur);
	for (int i = 0; i < m->n && !rc; i++) {
		int reps = 0;
		rc = measure(pl, m, i, i == 0 ? x : prev.y, &cur, &fwd_s[i], &bwd_s[i], &reps, err);
		free_bufs(pl, &prev);
		prev = cur;
		memset(&cur, 0, sizeof cur);
	}
	free_bufs(pl, &prev);
	free_bufs(pl, &cur);
	p_free(pl, x);
	return rc;
}

/* The cache is off: [partition] profile_cache = off. */
static int cache_off(const char *cache_dir)
{
	return cache_dir && !strcmp(cache_dir, "off");
}

static int costs_on(const ph_model *m, const char *cache_dir, const ph_profile_gpu *gpu,
		    const ph_profile_input *input, double *fwd_s, double *bwd_s, FILE *out, int table, ph_err *err)
{
	if (m->n < 1 || m->max_batch < 1)
		return ph_fail(err, PH_EINVAL, "profile: the model has %d layers and micro-batch %d; nothing to measure",
			       m->n, m->max_batch);
	/* A GPU's costs do not depend on BLAS threads: 0 in the key and out of
	 * the messages. */
	int threads = gpu ? 0 : openblas_get_num_threads();
	cpu_clock = !gpu && threads == 1;
	char device[256], path[4400], how[64] = "";
	if (gpu) {
		char name[128] = "?";
		size_t total = 0;
		ph_err e2 = { { 0 } };
		if (gpu->ops->describe(gpu->ordinal, name, sizeof name, &total, &e2) != PH_OK)
			return ph_fail(err, PH_EINVAL, "profile: cuda:%d: %s", gpu->ordinal, e2.msg);
		snprintf(device, sizeof device, "cuda:%d %s %s", gpu->ordinal, name,
			 gpu->precision == PH_PREC_BF16 ? "bf16" : "fp32");
	} else {
		cpu_device(device, sizeof device);
		snprintf(how, sizeof how, ", %d BLAS thread%s", threads, threads == 1 ? "" : "s");
	}
	char kdev[512];
	key_device(device, gpu != NULL, kdev, sizeof kdev);
	uint64_t key = ph_profile_key(m, threads, kdev, NULL, 0);
	ph_err perr = { { 0 } };
	int have_path = !cache_off(cache_dir) && ph_profile_cache_path(cache_dir, key, path, sizeof path, &perr) == PH_OK;
	if (have_path) {
		ph_err why = { { 0 } };
		if (ph_profile_cache_read(path, key, m, fwd_s, bwd_s, &why)) {
			if (out) {
				fprintf(out, "profile: cache hit %s (%s, micro-batch %d%s); not measuring again\n", path,
					gpu ? device : "cpu", m->max_batch, how);
				if (table)
					print_table(out, m, fwd_s, bwd_s);
			}
			return PH_OK;
		}
		/* a damaged or foreign file is a note, never a failure */
		if (why.msg[0] && out)
			fprintf(out, "profile: ignoring the cache: %s\n", why.msg);
	}
	/* Measuring on the CPU holds two neighbouring layers' buffers at the
	 * micro-batch size: one that does not fit is refused with both
	 * figures, before anything is allocated (an allocation the kernel
	 * grants and later cannot back ends the process without a word).
	 * cost = auto fell back to the FLOPs before it got here. */
	double need, have;
	char which[96];
	int at;
	if (!gpu && ph_memcheck_enabled() && (need = measure_need(m, &at)) > 0 &&
	    ph_mem_available(&have, which, sizeof which) && need > have) {
		const ph_layer *l = &m->layers[at];
		return ph_fail(err, PH_EINVAL, "profile: measuring layer %s at micro-batch %d needs ~%.1f MiB but %s "
			       "leaves %.1f MiB; lower [run] batch (or raise micro_batches), or set [partition] cost = flops",
			       l->cfg ? l->cfg->name : "?", m->max_batch, need / 1048576.0, which, have / 1048576.0);
	}
	/* The run's own samples when it can give them (loading them is the
	 * caller's business, and only happens on a miss). */
	const float *x0 = NULL;
	char src[160] = "random input";
	int random_for_data = 0; /* the run's samples did not load: not for the cache */
	if (input && input->get) {
		ph_err ierr = { { 0 } };
		x0 = input->get(input->ctx, m->max_batch, &ierr);
		if (x0)
			snprintf(src, sizeof src, "training samples");
		else
			snprintf(src, sizeof src, "random input (%.140s)", ierr.msg[0] ? ierr.msg : "no training data");
		random_for_data = !x0;
	}
	double t_start = now_s();
	if (out) {
		fprintf(out, "profile: measuring %d layers on %s, micro-batch %d%s, %s (%s time, median of up to %d after %d warm-up)\n",
			m->n, device, m->max_batch, how, src, cpu_clock ? "CPU" : "wall", PH_PROFILE_REPEATS, PH_PROFILE_WARMUP);
		fflush(out);
	}
	place pl = { NULL, NULL };
	int rc;
	if (gpu) {
		pl.dev = gpu->ops;
		if ((rc = pl.dev->open(gpu->ordinal, gpu->precision, &pl.rs, err)))
			return rc;
		rc = pl.dev->bind(pl.rs, err);
		if (!rc)
			rc = measure_all(&pl, m, x0, fwd_s, bwd_s, err);
		pl.dev->close(pl.rs);
	} else {
		rc = measure_all(&pl, m, x0, fwd_s, bwd_s, err);
		/* Samples a layer refuses (a token id past the vocabulary) are
		 * training's to report, with its own words: time random input. */
		if (rc && x0) {
			if (out)
				fprintf(out, "%s; timing random input instead\n", err->msg); /* the message says "profile:" */
			err->msg[0] = 0;
			rc = measure_all(&pl, m, NULL, fwd_s, bwd_s, err);
		}
		evict_release();
	}
	if (rc)
		return rc;
	if (out && table)
		print_table(out, m, fwd_s, bwd_s);
	else if (out)
		fprintf(out, "profile: measured in %.1f s\n", now_s() - t_start);
	if (!have_path) {
		if (out && !cache_off(cache_dir))
			fprintf(out, "profile: not cached: %s\n", perr.msg);
	} else if (random_for_data) {
		/* a later run with its data must measure its own samples */
		if (out)
			fprintf(out, "profile: not cached: timed on random input, not the run's samples\n");
	} else {
		ph_err werr = { { 0 } };
		if (ph_profile_cache_write(path, key, m, fwd_s, bwd_s, &werr)) {
			if (out)
				fprintf(out, "profile: not cached: %s\n", werr.msg);
		} else if (out) {
			fprintf(out, "profile: cached in %s\n", path);
		}
	}
	return PH_OK;
}

int ph_profile_costs_on(const ph_model *m, const char *cache_dir, const ph_profile_gpu *gpu, double *fwd_s,
			double *bwd_s, FILE *out, ph_err *err)
{
	return costs_on(m, cache_dir, gpu, NULL, fwd_s, bwd_s, out, 1, err);
}

int ph_profile_costs(const ph_model *m, const char *cache_dir, double *fwd_s, double *bwd_s, FILE *out,
		     ph_err *err)
{
	return ph_profile_costs_on(m, cache_dir, NULL, fwd_s, bwd_s, out, err);
}

int ph_profile_run_threads(const ph_config *c)
{
	/* the engine's rule: the cores shared by this process's ranks */
	return ph_config_blas_threads(c, sysconf(_SC_NPROCESSORS_ONLN), ph_config_busy(c, (int)c->run.stages));
}

/* cost = auto profiles when measuring takes at most this long (estimated
 * from the FLOPs at PH_PROFILE_AUTO_GFLOPS per BLAS thread). */
#define PH_PROFILE_AUTO_BUDGET_S 10.0
#define PH_PROFILE_AUTO_GFLOPS 5.0

/* cost = auto on the CPU: the cache's answer, if it holds one (1), at
 * the run's BLAS threads; a damaged file is a note, as where cost =
 * profile reads it. */
static int auto_cache_hit(const ph_model *m, const ph_config *c, double *fwd_s, double *bwd_s, FILE *out)
{
	openblas_set_num_threads(ph_profile_run_threads(c));
	if (cache_off(c->part.profile_cache))
		return 0;
	char device[256], kdev[512], path[4400];
	cpu_device(device, sizeof device);
	key_device(device, 0, kdev, sizeof kdev);
	uint64_t key = ph_profile_key(m, openblas_get_num_threads(), kdev, NULL, 0);
	ph_err e2 = { { 0 } };
	if (ph_profile_cache_path(c->part.profile_cache, key, path, sizeof path, &e2) != PH_OK)
		return 0;
	if (ph_profile_cache_read(path, key, m, fwd_s, bwd_s, &e2)) {
		if (out)
			fprintf(out, "profile: cache hit %s\n", path);
		return 1;
	}
	if (e2.msg[0] && out)
		fprintf(out, "profile: ignoring the cache: %s\n", e2.msg);
	return 0;
}

int ph_profile_costs_for_run(const ph_model *m, const ph_config *c, const ph_profile_input *input, double *fwd_s,
			     double *bwd_s, int *used, FILE *out, ph_err *err)
{
	int table = c->part.cost == PH_COST_PROFILE;
	*used = 0;
	if (c->part.cost == PH_COST_AUTO) {
		/* one chunk: nothing to cut, nothing to measure */
		if (c->run.stages * c->run.chunks <= 1)
			return PH_OK;
		/* measuring a layer in host memory that does not fit: the FLOPs
		 * instead, so that the run's own memory check (memcheck.h)
		 * refuses it with both figures, not the profiler's allocation */
		double need = 0, have;
		char which[96];
		int at;
		if (!c->place.cuda)
			need = measure_need(m, &at);
		if (need > 0 && ph_memcheck_enabled() && ph_mem_available(&have, which, sizeof which) && need > have) {
			if (out)
				fprintf(out, "cost: flops ([partition] cost = auto: measuring a layer needs ~%.1f MiB but %s "
					"leaves %.1f MiB)\n", need / 1048576.0, which, have / 1048576.0);
			return PH_OK;
		}
		/* and the BLAS threads' buffers, under ulimit -v (memcheck.h) */
		double vneed, vroom;
		long vthreads;
		if (!c->place.cuda && !ph_mem_blas_fits(c, 1, need, &vneed, &vroom, &vthreads)) {
			if (out)
				fprintf(out, "cost: flops ([partition] cost = auto: measuring with %ld BLAS threads maps "
					"~%.1f MiB but ulimit -v leaves %.1f MiB)\n", vthreads, vneed / 1048576.0,
					(vroom > 0 ? vroom : 0) / 1048576.0);
			return PH_OK;
		}
		/* the FLOPs of a micro-batch (the layers' meta counts them per
		 * sample; counted so, a micro-batch of 4M samples looked like
		 * 0.0003 s and --plan measured for minutes in 10+ GB) */
		double flops = 0;
		for (int i = 0; i < m->n; i++)
			flops += m->layers[i].meta.fwd_flops + m->layers[i].meta.bwd_flops;
		flops *= m->max_batch;
		double est = (PH_PROFILE_WARMUP + PH_PROFILE_REPEATS) * flops /
			     (PH_PROFILE_AUTO_GFLOPS * 1e9 * (c->place.cuda ? 100 : ph_profile_run_threads(c)));
		/* and on the CPU, each timed call's cache eviction (2 x the LLC
		 * written, before each of 2 x (warm-up + repeats) calls a layer):
		 * a deep model of small layers once estimated 0.003 s and
		 * measured for 24 */
		/* a cached profile is free whatever measuring would cost: look
		 * for one first (and before timing an eviction, which writes
		 * up to 512 MiB) */
		if (!c->place.cuda && auto_cache_hit(m, c, fwd_s, bwd_s, out)) {
			*used = 1;
			return PH_OK;
		}
		if (!c->place.cuda && est <= PH_PROFILE_AUTO_BUDGET_S)
			est += (double)m->n * 2 * (PH_PROFILE_WARMUP + PH_PROFILE_REPEATS) * evict_seconds();
		if (est > PH_PROFILE_AUTO_BUDGET_S) {
			if (out)
				fprintf(out, "cost: flops ([partition] cost = auto: measuring would take about %.0f s; "
					"cost = profile measures anyway)\n", est);
			return PH_OK;
		}
	}
	int rc;
	if (!c->place.cuda) {
		/* cost = profile, asked for: its BLAS threads' buffers under
		 * ulimit -v, or one line saying why not (auto checked above) */
		if (table && (rc = ph_memcheck_blas(c, 1, 0, err)))
			return rc;
		openblas_set_num_threads(ph_profile_run_threads(c));
		rc = costs_on(m, c->part.profile_cache, NULL, input, fwd_s, bwd_s, out, table, err);
	} else {
		/* Ranks on GPUs: measure on the first rank's GPU, at the run's
		 * precision (a placement mixing CPU and GPU ranks is refused later). */
		ph_profile_gpu gpu = { NULL, -1, (int)c->run.precision };
		for (int r = 0; r < c->place.ranks && gpu.ordinal < 0; r++)
			gpu.ordinal = c->place.ordinal[r];
		if (gpu.ordinal < 0)
			return ph_fail(err, PH_EINVAL, "profile: [run] devices places no rank on a GPU");
		if (!(gpu.ops = ph_cuda_backend(err)))
			return PH_EINVAL;
		rc = costs_on(m, c->part.profile_cache, &gpu, input, fwd_s, bwd_s, out, table, err);
	}
	if (!rc)
		*used = 1;
	return rc;
}
