/* SPDX-License-Identifier: MIT */
/* LD_PRELOAD shim for tests/test-oom.sh: counts allocations and makes the
 * Nth one fail (NULL, errno ENOMEM), to prove that a run out of memory at
 * any allocation says so in one line and exits 1: never a crash, never a
 * checkpoint set aside as damaged, never a run that goes on with less.
 *
 *   PH_OOM_N=N        the Nth counted call fails (0 or unset: none)
 *   PH_OOM_APP=a:b    count only calls made from an object whose path holds
 *                     one of the texts a, b, ... (the build tree: pipehost
 *                     and its plugins, not the shell or libc's own; libcjson
 *                     for the parser's); unset: every call
 *   PH_OOM_AFTER=text count only after a file whose path holds text was
 *                     opened (open, openat, fopen): a window of the run
 *   PH_OOM_COUNT=file at exit, the number of counted calls is written there
 *
 * strdup, strndup and getline are interposed so that their allocations
 * count as their caller's (libc's own malloc calls do not pass the PLT).
 * dlsym's own calloc, before the real one is known, comes from a static
 * buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *(*r_malloc)(size_t);
static void *(*r_calloc)(size_t, size_t);
static void *(*r_realloc)(void *, size_t);
static int (*r_posix_memalign)(void **, size_t, size_t);
static void *(*r_aligned_alloc)(size_t, size_t);
static void (*r_free)(void *);
static ssize_t (*r_getline)(char **, size_t *, FILE *);
static int (*r_open)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static FILE *(*r_fopen)(const char *, const char *);

static char boot[16384] __attribute__((aligned(64)));
static size_t boot_used;
static int in_init, ready;
static long fail_at;
static const char *app, *after, *count_path;
static atomic_long counter;
static atomic_int opened; /* PH_OOM_AFTER's file seen */
static __thread int busy; /* inside the shim's own dladdr */

static void *boot_alloc(size_t n)
{
	size_t off = (boot_used + 63) & ~(size_t)63;
	if (off + n > sizeof boot)
		return NULL;
	boot_used = off + n;
	return memset(boot + off, 0, n);
}

static int is_boot(const void *p)
{
	return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static void init(void)
{
	if (ready || in_init)
		return;
	in_init = 1;
	r_malloc = dlsym(RTLD_NEXT, "malloc");
	r_calloc = dlsym(RTLD_NEXT, "calloc");
	r_realloc = dlsym(RTLD_NEXT, "realloc");
	r_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
	r_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
	r_free = dlsym(RTLD_NEXT, "free");
	r_getline = dlsym(RTLD_NEXT, "getline");
	r_open = dlsym(RTLD_NEXT, "open");
	r_openat = dlsym(RTLD_NEXT, "openat");
	r_fopen = dlsym(RTLD_NEXT, "fopen");
	const char *s = getenv("PH_OOM_N");
	fail_at = s ? atol(s) : 0;
	app = getenv("PH_OOM_APP");
	after = getenv("PH_OOM_AFTER");
	count_path = getenv("PH_OOM_COUNT");
	if (!after || !*after)
		opened = 1;
	in_init = 0;
	ready = 1;
}

/* 1 when this call, made from ra, must fail */
static int should_fail(void *ra)
{
	if (!ready || busy || !opened)
		return 0;
	if (app && *app) {
		Dl_info di;
		busy++;
		int mine = 0;
		if (dladdr(ra, &di) && di.dli_fname)
			for (const char *a = app; *a && !mine; a += strcspn(a, ":"), a += *a == ':') {
				size_t n = strcspn(a, ":");
				for (const char *f = di.dli_fname; n && *f && !mine; f++)
					mine = !strncmp(f, a, n);
			}
		busy--;
		if (!mine)
			return 0;
	}
	long c = atomic_fetch_add(&counter, 1) + 1;
	return fail_at > 0 && c == fail_at;
}

#define RA __builtin_extract_return_addr(__builtin_return_address(0))

static void *do_malloc(size_t n, void *ra)
{
	init();
	if (!r_malloc)
		return boot_alloc(n);
	if (should_fail(ra)) {
		errno = ENOMEM;
		return NULL;
	}
	return r_malloc(n);
}

void *malloc(size_t n)
{
	return do_malloc(n, RA);
}

void *calloc(size_t a, size_t b)
{
	void *ra = RA;
	init();
	if (!r_calloc) /* dlsym's own, during init */
		return boot_alloc(a * b);
	if (should_fail(ra)) {
		errno = ENOMEM;
		return NULL;
	}
	return r_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	void *ra = RA;
	init();
	if (is_boot(p)) {
		void *q = do_malloc(n, ra);
		if (q)
			memcpy(q, p, n < sizeof boot - (size_t)((char *)p - boot) ? n : sizeof boot - (size_t)((char *)p - boot));
		return q;
	}
	if (should_fail(ra)) {
		errno = ENOMEM;
		return NULL;
	}
	return r_realloc(p, n);
}

void free(void *p)
{
	if (!p || is_boot(p))
		return;
	init();
	r_free(p);
}

int posix_memalign(void **out, size_t al, size_t n)
{
	void *ra = RA;
	init();
	if (should_fail(ra))
		return ENOMEM;
	return r_posix_memalign(out, al, n);
}

void *aligned_alloc(size_t al, size_t n)
{
	void *ra = RA;
	init();
	if (should_fail(ra)) {
		errno = ENOMEM;
		return NULL;
	}
	return r_aligned_alloc(al, n);
}

char *strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = do_malloc(n, RA);
	return p ? memcpy(p, s, n) : NULL;
}

char *strndup(const char *s, size_t m)
{
	size_t n = strnlen(s, m);
	char *p = do_malloc(n + 1, RA);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

ssize_t getline(char **lp, size_t *n, FILE *f)
{
	void *ra = RA;
	init();
	if (should_fail(ra)) {
		errno = ENOMEM;
		return -1;
	}
	return r_getline(lp, n, f);
}

static void saw(const char *path)
{
	if (!opened && path && after && strstr(path, after))
		opened = 1;
}

int open(const char *path, int flags, ...)
{
	init();
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	int fd = r_open(path, flags, mode);
	saw(path);
	return fd;
}

int openat(int dir, const char *path, int flags, ...)
{
	init();
	mode_t mode = 0;
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	int fd = r_openat(dir, path, flags, mode);
	saw(path);
	return fd;
}

FILE *fopen(const char *path, const char *mode)
{
	init();
	FILE *f = r_fopen(path, mode);
	saw(path);
	return f;
}

__attribute__((destructor)) static void fini(void)
{
	if (!count_path)
		return;
	char line[32];
	int len = snprintf(line, sizeof line, "%ld\n", (long)atomic_load(&counter));
	int fd = r_open ? r_open(count_path, O_WRONLY | O_TRUNC | O_CREAT, 0644) : -1;
	if (fd >= 0) {
		if (write(fd, line, (size_t)len) < 0) {
			/* nothing to do: the test then reads no count */
		}
		close(fd);
	}
}
