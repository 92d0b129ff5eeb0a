/* SPDX-License-Identifier: MIT */
/*
 * cuemu.cc: the emulator's kernel scheduler and runtime API (see
 * include/cuda_runtime.h for the model, README.md for what it checks).
 *
 * A launch runs the blocks of its grid one after another on the calling
 * host thread.  The threads of a block are fibers on stacks of their own;
 * a fiber runs until it reaches a barrier or returns, then the scheduler
 * runs the next runnable one.  Barriers:
 *   - __syncthreads: released when every thread of the block that has not
 *     returned has arrived (as on sm_70 and later, returned threads do not
 *     hold it);
 *   - warp barriers (__syncwarp, shuffles, ballots), one per mask: released
 *     when every lane of the mask that has not returned has arrived.
 * A block whose fibers all wait on barriers that cannot be released is a
 * deadlock: the emulator prints which kernel and aborts.
 *
 * PH_CUEMU_ORDER=forward|reverse|shuffle picks the order in which runnable
 * threads run between barriers; a kernel without races gives the same bits
 * in every order, so tests run twice in different orders find races.
 */
#include <cuda_runtime.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuemu-internal.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace __attribute__((visibility("default"))) cuemu {

thread_local thread_view *cur;
thread_local grid_view launch;
static thread_local cudaError_t last_error = cudaSuccess;

/* ---------------------------------------------------------------- */
/* Context switch                                                    */

#if defined(__x86_64__)
/* cuemu_switch(&save, to): push the callee-saved registers and the FP
 * control words, save the stack pointer, load `to`, pop, return there. */
extern "C" void cuemu_switch(void **save, void *to);
__asm__(".text\n"
	".globl cuemu_switch\n"
	".hidden cuemu_switch\n"
	".type cuemu_switch,@function\n"
	"cuemu_switch:\n"
	"\tpushq %rbp\n"
	"\tpushq %rbx\n"
	"\tpushq %r12\n"
	"\tpushq %r13\n"
	"\tpushq %r14\n"
	"\tpushq %r15\n"
	"\tsubq $8, %rsp\n"
	"\tstmxcsr (%rsp)\n"
	"\tfnstcw 4(%rsp)\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tldmxcsr (%rsp)\n"
	"\tfldcw 4(%rsp)\n"
	"\taddq $8, %rsp\n"
	"\tpopq %r15\n"
	"\tpopq %r14\n"
	"\tpopq %r13\n"
	"\tpopq %r12\n"
	"\tpopq %rbx\n"
	"\tpopq %rbp\n"
	"\tret\n"
	".size cuemu_switch,.-cuemu_switch\n");
#endif

enum { STACK_BYTES = 256 * 1024, MAX_THREADS = 1024, MAX_WARP_BARS = 32 };

enum fstate { F_READY, F_WAIT, F_DONE };

struct fiber {
	thread_view view;
	fstate state;
	const unsigned *wait_on; /* the generation counter it waits on */
	unsigned wait_gen;
	char *stack;
#if defined(__x86_64__)
	void *sp;
#else
	ucontext_t uc;
#endif
};

struct warp_bar {
	unsigned mask, arrived, gen;
};

struct warp {
	unsigned live; /* lanes that have not returned */
	int nbars;
	warp_bar bars[MAX_WARP_BARS];
	unsigned long long slot[32];
};

/* one per host thread: the block being run */
struct block_run {
	fiber f[MAX_THREADS];
	int order[MAX_THREADS]; /* PH_CUEMU_ORDER=shuffle: this pass's order */
	warp w[MAX_THREADS / 32];
	int n;                 /* threads in the block */
	int live;              /* threads that have not returned */
	int arrived;           /* at __syncthreads */
	unsigned gen;          /* __syncthreads generation */
	void (*body)(void *);
	void *arg;
	const char *name;
	char *stacks;          /* MAX_THREADS stacks, each above a guard page */
	fiber *running;
#if defined(__x86_64__)
	void *sched_sp;
#else
	ucontext_t sched_uc;
#endif
};

static thread_local block_run *br;

static void fatal(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "cuemu: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\n");
	fflush(stderr);
	abort();
}

static void yield_to_scheduler(void)
{
	fiber *f = br->running;
#if defined(__x86_64__)
	cuemu_switch(&f->sp, br->sched_sp);
#else
	swapcontext(&f->uc, &br->sched_uc);
#endif
}

static void wait_on(const unsigned *gen_ptr, unsigned gen)
{
	fiber *f = br->running;
	f->state = F_WAIT;
	f->wait_on = gen_ptr;
	f->wait_gen = gen;
	yield_to_scheduler();
}

/* release warp barriers that every live lane of their mask has reached */
static void warp_check(warp *w)
{
	for (int i = 0; i < w->nbars; i++) {
		warp_bar *b = &w->bars[i];
		unsigned need = b->mask & w->live;
		if (b->arrived && (b->arrived & need) == need) {
			b->gen++;
			b->arrived = 0;
		}
	}
}

static void block_check(void)
{
	if (br->arrived && br->arrived >= br->live) {
		br->gen++;
		br->arrived = 0;
	}
}

static void fiber_main(void)
{
	block_run *b = br;
	b->body(b->arg);
	fiber *f = b->running;
	f->state = F_DONE;
	b->live--;
	warp *w = &b->w[(f - b->f) / 32];
	w->live &= ~(1u << f->view.lane);
	warp_check(w);
	block_check();
	yield_to_scheduler();
	fatal("%s%s", "a finished thread was resumed", "");
}

#if defined(__x86_64__)
/* entered by cuemu_switch's ret: the stack must look like a call's */
extern "C" void cuemu_fiber_entry(void);
__asm__(".text\n"
	".globl cuemu_fiber_entry\n"
	".hidden cuemu_fiber_entry\n"
	"cuemu_fiber_entry:\n"
	"\tcall cuemu_fiber_main_c\n"
	"\tud2\n");
extern "C" __attribute__((visibility("hidden"))) void cuemu_fiber_main_c(void) { fiber_main(); }
#endif

static void fiber_init(fiber *f, char *stack)
{
	f->stack = stack;
	f->state = F_READY;
#if defined(__x86_64__)
	/* the frame cuemu_switch pops: [fp control][r15 r14 r13 r12 rbx rbp]
	 * [return address], ending at the 16-aligned top of the stack; the ret
	 * leaves rsp at the top, so the call in cuemu_fiber_entry enters
	 * cuemu_fiber_main_c with the stack aligned as the ABI wants */
	uintptr_t top = ((uintptr_t)(stack + STACK_BYTES)) & ~(uintptr_t)15;
	uint64_t *sp = (uint64_t *)(top - 64);
	memset(sp, 0, 64);
	((uint32_t *)sp)[0] = 0x1f80; /* mxcsr: round to nearest, exceptions masked */
	((uint16_t *)sp)[2] = 0x037f; /* x87 control word */
	sp[7] = (uint64_t)(uintptr_t)cuemu_fiber_entry;
	f->sp = sp;
#else
	getcontext(&f->uc);
	f->uc.uc_stack.ss_sp = stack;
	f->uc.uc_stack.ss_size = STACK_BYTES;
	f->uc.uc_link = NULL;
	makecontext(&f->uc, fiber_main, 0);
#endif
}

static int order_mode(void)
{
	static int mode = -1;
	if (mode < 0) {
		const char *e = getenv("PH_CUEMU_ORDER");
		mode = !e || !strcmp(e, "forward") ? 0 : !strcmp(e, "reverse") ? 1 : 2;
	}
	return mode;
}

static block_run *block_state(void)
{
	if (!br) {
		br = (block_run *)calloc(1, sizeof *br);
		size_t each = STACK_BYTES + 4096;
		void *m = mmap(NULL, each * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (!br || m == MAP_FAILED)
			fatal("%s%s", "cannot allocate fiber stacks", "");
		br->stacks = (char *)m;
		for (int i = 0; i < MAX_THREADS; i++) /* a guard page below each stack */
			mprotect(br->stacks + i * each, 4096, PROT_NONE);
	}
	return br;
}

static void run_block(block_run *b, unsigned seed)
{
	size_t each = STACK_BYTES + 4096;
	for (int i = 0; i < b->n; i++) {
		fiber *f = &b->f[i];
		unsigned bx = launch.dim.x, by = launch.dim.y;
		f->view.tid.x = i % bx;
		f->view.tid.y = (i / bx) % by;
		f->view.tid.z = i / (bx * by);
		f->view.lane = i % 32;
		fiber_init(f, b->stacks + i * each + 4096);
	}
	int nw = (b->n + 31) / 32;
	for (int w = 0; w < nw; w++) {
		int lanes = b->n - w * 32 < 32 ? b->n - w * 32 : 32;
		b->w[w].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
		b->w[w].nbars = 0;
	}
	b->live = b->n;
	b->arrived = 0;
	for (int i = 0; i < b->n; i++)
		b->order[i] = i;
	int mode = order_mode();
	int done = 0;
	while (done < b->n) {
		int progress = 0;
		if (mode == 2) { /* a fresh random order each pass (Fisher-Yates) */
			for (int k = b->n - 1; k > 0; k--) {
				seed = seed * 1103515245u + 12345u;
				int j = (int)((seed >> 8) % (unsigned)(k + 1)), t = b->order[k];
				b->order[k] = b->order[j];
				b->order[j] = t;
			}
		}
		for (int k = 0; k < b->n; k++) {
			int i = mode == 0 ? k : mode == 1 ? b->n - 1 - k : b->order[k];
			fiber *f = &b->f[i];
			if (f->state == F_DONE)
				continue;
			if (f->state == F_WAIT) {
				if (*f->wait_on == f->wait_gen)
					continue;
				f->state = F_READY;
			}
			b->running = f;
			cur = &f->view;
#if defined(__x86_64__)
			cuemu_switch(&b->sched_sp, f->sp);
#else
			swapcontext(&b->sched_uc, &f->uc);
#endif
			progress = 1;
			if (f->state == F_DONE)
				done++;
		}
		if (!progress && done < b->n)
			fatal("deadlock in kernel %s: threads wait at a barrier (__syncthreads, __syncwarp or a "
			      "shuffle) that the others of their block or warp never reach%s",
			      b->name, "");
	}
	cur = NULL;
}

static std::atomic<unsigned> launches;

/* Runs a whole grid on this host thread (a stream's, or the caller's). */
static void exec_grid(const cfg &c, const char *name, void (*body)(void *), void *arg)
{
	block_run *b = block_state();
	if (b->body)
		fatal("kernel %s launched from inside kernel %s", name, b->name);
	b->body = body;
	b->arg = arg;
	b->name = name;
	b->n = (int)(c.block.x * c.block.y * c.block.z);
	grid_view saved = launch;
	launch.dim = c.block;
	launch.grid = c.grid;
	unsigned seed = launches.fetch_add(1) * 2654435761u;
	for (unsigned z = 0; z < c.grid.z; z++)
		for (unsigned y = 0; y < c.grid.y; y++)
			for (unsigned x = 0; x < c.grid.x; x++) {
				launch.block.x = x;
				launch.block.y = y;
				launch.block.z = z;
				run_block(b, seed + x + 7919u * (y + 7919u * z));
			}
	launch = saved;
	b->body = NULL;
}

/* Launches per kernel, by the name written at the launch without template
 * arguments: tests count a host's rounding passes (cuemu_launches). */
static std::mutex launches_mu;
static std::map<std::string, unsigned long> launches_by_name;

/* PH_CUEMU_LAUNCHES=1: at exit, the launches per kernel on stderr, the
 * most launched first (how many kernels a training step costs, whatever
 * the tensors' sizes: a GPU pays a few microseconds of host time each). */
static struct launch_report {
	~launch_report()
	{
		const char *e = getenv("PH_CUEMU_LAUNCHES");
		if (!e || strcmp(e, "1"))
			return;
		std::vector<std::pair<unsigned long, std::string>> v;
		unsigned long total = 0;
		for (auto &kv : launches_by_name) {
			v.push_back({kv.second, kv.first});
			total += kv.second;
		}
		std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
		fprintf(stderr, "cuemu: %lu kernel launches\n", total);
		for (auto &p : v)
			fprintf(stderr, "cuemu: %10lu  %s\n", p.first, p.second.c_str());
	}
} launch_report_at_exit;

static std::string base_name(const char *name)
{
	std::string s(name);
	size_t lt = s.find('<');
	if (lt != std::string::npos)
		s.erase(lt);
	while (!s.empty() && s.back() == ' ')
		s.pop_back();
	return s;
}

void run_grid(const cfg &c, const char *name, void (*body)(void *), void *arg, void (*free_arg)(void *))
{
	unsigned long long threads = (unsigned long long)c.block.x * c.block.y * c.block.z;
	if (!threads || threads > MAX_THREADS || c.block.z > 64 || !c.grid.x || !c.grid.y || !c.grid.z ||
	    c.grid.y > 65535 || c.grid.z > 65535 || c.shmem > 48 * 1024) {
		last_error = cudaErrorInvalidConfiguration;
		free_arg(arg);
		return;
	}
	{
		std::lock_guard<std::mutex> lk(launches_mu);
		launches_by_name[base_name(name)]++;
	}
	cfg cc = c;
	enqueue(c.stream, [cc, name, body, arg, free_arg] {
		exec_grid(cc, name, body, arg);
		free_arg(arg);
	});
}

void syncthreads(void)
{
	block_run *b = br;
	if (!b || !b->running)
		fatal("%s%s", "__syncthreads outside a kernel", "");
	unsigned gen = b->gen;
	b->arrived++;
	if (b->arrived >= b->live) {
		b->gen++;
		b->arrived = 0;
		return;
	}
	wait_on(&b->gen, gen);
}

static warp_bar *warp_arrive(warp *w, unsigned mask, unsigned bit)
{
	warp_bar *bar = NULL;
	for (int i = 0; i < w->nbars; i++)
		if (w->bars[i].mask == mask) {
			bar = &w->bars[i];
			break;
		}
	if (!bar) {
		if (w->nbars == MAX_WARP_BARS)
			fatal("kernel %s uses more than 32 different warp masks%s", br->name, "");
		bar = &w->bars[w->nbars++];
		bar->mask = mask;
		bar->arrived = 0;
		bar->gen = 0;
	}
	bar->arrived |= bit;
	return bar;
}

static void warp_barrier(unsigned mask)
{
	block_run *b = br;
	if (!b || !b->running)
		fatal("%s%s", "a warp operation outside a kernel", "");
	fiber *f = b->running;
	warp *w = &b->w[(f - b->f) / 32];
	unsigned bit = 1u << f->view.lane;
	if (!(mask & bit))
		fatal("kernel %s: a lane calls a warp operation with a mask that leaves it out%s", b->name, "");
	warp_bar *bar = warp_arrive(w, mask, bit);
	unsigned gen = bar->gen;
	unsigned need = mask & w->live;
	if ((bar->arrived & need) == need) {
		bar->gen++;
		bar->arrived = 0;
		return;
	}
	wait_on(&bar->gen, gen);
}

void syncwarp(unsigned mask) { warp_barrier(mask); }

unsigned long long exchange(unsigned mask, unsigned long long v, int src)
{
	fiber *f = br ? br->running : NULL;
	if (!f)
		fatal("%s%s", "a shuffle outside a kernel", "");
	warp *w = &br->w[(f - br->f) / 32];
	w->slot[f->view.lane] = v;
	warp_barrier(mask);
	/* a source lane outside the mask or past the block: the caller's own value */
	unsigned long long r = (src >= 0 && src < 32 && (mask & (1u << src)) && (w->live & (1u << src))) ? w->slot[src] : v;
	warp_barrier(mask);
	return r;
}

unsigned ballot(unsigned mask, int pred)
{
	fiber *f = br ? br->running : NULL;
	if (!f)
		fatal("%s%s", "a ballot outside a kernel", "");
	warp *w = &br->w[(f - br->f) / 32];
	w->slot[f->view.lane] = pred != 0;
	warp_barrier(mask);
	unsigned r = 0;
	for (int l = 0; l < 32; l++)
		if ((mask & (1u << l)) && (w->live & (1u << l)) && w->slot[l])
			r |= 1u << l;
	warp_barrier(mask);
	return r;
}

} /* namespace cuemu */

/* ---------------------------------------------------------------- */
/* Runtime API                                                        */

using cuemu::last_error;

static cudaError_t ret(cudaError_t e)
{
	if (e != cudaSuccess)
		last_error = e;
	return e;
}

static int device_count(void)
{
	static int n = -1;
	if (n < 0) {
		const char *e = getenv("PH_CUEMU_DEVICES");
		n = e ? atoi(e) : 1;
		if (n < 0)
			n = 0;
	}
	return n;
}

static thread_local int current_device;
static const size_t DEVICE_BYTES = (size_t)16 << 30;
static std::atomic<long long> allocated[64];

/* Each allocation carries a header before the pointer: its size and owner,
 * so cudaFree can check the pointer and cudaMemGetInfo can count. */
struct alloc_head {
	unsigned long long magic;
	size_t bytes;
	int device;
	int pad[11];
};
static const unsigned long long ALLOC_MAGIC = 0x63756d656d75ull; /* "cuemu" */

/* How many launches of kernel `name` (as written at the launch, without
 * template arguments) this process has made. */
EXPORT unsigned long cuemu_launches(const char *name)
{
	std::lock_guard<std::mutex> lk(cuemu::launches_mu);
	auto it = cuemu::launches_by_name.find(name);
	return it == cuemu::launches_by_name.end() ? 0 : it->second;
}

EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
	*count = device_count();
	return device_count() ? cudaSuccess : ret(cudaErrorNoDevice);
}

/* A bus id per emulated GPU: processes that pick the same ordinal share
 * one, as on a machine */
EXPORT cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
	if (device < 0 || device >= device_count())
		return ret(cudaErrorInvalidDevice);
	if (!id || len < 13)
		return ret(cudaErrorInvalidValue);
	snprintf(id, (size_t)len, "0000:%02X:00.0", (unsigned)(0x10 + device));
	return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device)
{
	if (device < 0 || device >= device_count())
		return ret(cudaErrorInvalidDevice);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "cuemu (CPU emulation of a GPU)");
	p->totalGlobalMem = DEVICE_BYTES;
	p->sharedMemPerBlock = 48 * 1024;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
	p->maxThreadsDim[2] = 64;
	p->maxGridSize[0] = 0x7fffffff;
	p->maxGridSize[1] = p->maxGridSize[2] = 65535;
	p->major = 9;
	p->minor = 0;
	p->multiProcessorCount = 1;
	return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int device)
{
	if (device < 0 || device >= device_count())
		return ret(cudaErrorInvalidDevice);
	current_device = device;
	return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *device)
{
	*device = current_device;
	return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
	if (device < 0 || device >= device_count() || peer < 0 || peer >= device_count())
		return ret(cudaErrorInvalidDevice);
	*can = device != peer;
	return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags)
{
	(void)flags;
	if (peer < 0 || peer >= device_count())
		return ret(cudaErrorInvalidDevice);
	return cudaSuccess;
}

EXPORT cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

EXPORT const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	default: return "cudaError";
	}
}

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidDevicePointer: return "invalid device pointer";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	default: return "unknown error";
	}
}

/* ---------------------------------------------------------------- */
/* Streams                                                            */
/*                                                                    */
/* Each stream is a queue of operations and a thread that runs them in  */
/* order.  PH_CUEMU_STREAMS picks when it runs them:                    */
/*   lazy (default)  only when something waits: a synchronize, a query,  */
/*                   another stream waiting on an event recorded here,   */
/*                   a copy to pageable host memory, cudaFree; so work   */
/*                   another stream uses without an event has simply not */
/*                   happened yet, every time, and a test sees it;       */
/*   eager           as soon as queued, concurrently with the host;      */
/*   sync            at once on the calling thread (streams ignored).    */

namespace cuemu {

enum { S_LAZY, S_EAGER, S_SYNC };

static int stream_mode(void)
{
	static int mode = -1;
	if (mode < 0) {
		const char *e = getenv("PH_CUEMU_STREAMS");
		mode = !e || !strcmp(e, "lazy") ? S_LAZY : !strcmp(e, "eager") ? S_EAGER : S_SYNC;
	}
	return mode;
}

} /* namespace cuemu */

struct CUstream_st {
	int device;
	std::mutex m;
	std::condition_variable cv;
	std::deque<std::pair<uint64_t, std::function<void()>>> q;
	uint64_t queued = 0; /* sequence number of the last operation queued */
	uint64_t done = 0;   /* ... of the last one finished */
	uint64_t flush = 0;  /* lazy: run everything up to this one */
	bool stop = false;
	std::thread worker;
};

struct CUevent_st {
	int device;
	std::mutex m;
	CUstream_st *stream; /* where it was last recorded (NULL: never, or the null stream) */
	uint64_t seq;        /* the record's place in that stream */
};

namespace cuemu {

/* every stream ever made: cudaFree and cudaDeviceSynchronize wait for all;
 * destroyed streams are stopped but kept, as events may still name them */
static std::mutex streams_m;
static std::vector<CUstream_st *> streams;

static void stream_loop(CUstream_st *s)
{
	std::unique_lock<std::mutex> lk(s->m);
	for (;;) {
		s->cv.wait(lk, [s] {
			return (s->stop && s->q.empty()) ||
			       (!s->q.empty() && (stream_mode() != S_LAZY || s->q.front().first <= s->flush || s->stop));
		});
		if (s->q.empty())
			return;
		std::function<void()> fn = std::move(s->q.front().second);
		uint64_t seq = s->q.front().first;
		s->q.pop_front();
		lk.unlock();
		fn();
		lk.lock();
		s->done = seq;
		s->cv.notify_all();
	}
}

/* Run stream s up to operation seq and wait for it (0: nothing). */
static void wait_stream(CUstream_st *s, uint64_t seq)
{
	if (!s || !seq)
		return;
	std::unique_lock<std::mutex> lk(s->m);
	if (seq > s->flush)
		s->flush = seq;
	s->cv.notify_all();
	s->cv.wait(lk, [s, seq] { return s->done >= seq; });
}

/* Ask stream s to run up to seq, without waiting. */
static void nudge_stream(CUstream_st *s, uint64_t seq)
{
	std::lock_guard<std::mutex> lk(s->m);
	if (seq > s->flush)
		s->flush = seq;
	s->cv.notify_all();
}

static uint64_t push(CUstream_st *s, std::function<void()> fn)
{
	std::lock_guard<std::mutex> lk(s->m);
	uint64_t seq = ++s->queued;
	s->q.emplace_back(seq, std::move(fn));
	s->cv.notify_all();
	return seq;
}

bool runs_at_once(cudaStream_t s)
{
	return !s || stream_mode() == S_SYNC;
}

void enqueue(cudaStream_t s, std::function<void()> fn)
{
	if (runs_at_once(s))
		fn();
	else
		push(s, std::move(fn));
}

/* lazy: the stream runs up to fn now, without anyone waiting for it */
void enqueue_eager(cudaStream_t s, std::function<void()> fn)
{
	if (runs_at_once(s))
		fn();
	else
		nudge_stream(s, push(s, std::move(fn)));
}

static void sync_stream(CUstream_st *s)
{
	uint64_t seq;
	{
		std::lock_guard<std::mutex> lk(s->m);
		seq = s->queued;
	}
	wait_stream(s, seq);
}

static void sync_all(void)
{
	std::vector<CUstream_st *> all;
	{
		std::lock_guard<std::mutex> lk(streams_m);
		all = streams;
	}
	for (CUstream_st *s : all)
		sync_stream(s);
}

/* Device allocations and pinned host memory, to tell the pointers of a copy
 * apart as the driver does (unified addressing). */
static std::mutex mem_m;
static std::map<uintptr_t, size_t> device_mem, pinned_mem;

static bool in(const std::map<uintptr_t, size_t> &m, const void *p)
{
	std::lock_guard<std::mutex> lk(mem_m);
	auto it = m.upper_bound((uintptr_t)p);
	if (it == m.begin())
		return false;
	--it;
	return (uintptr_t)p < it->first + (it->second ? it->second : 1);
}

static std::atomic<long> nccl_queued;

void nccl_queued_add(long delta)
{
	nccl_queued += delta;
}

/* On a GPU, cudaFree and cudaDeviceSynchronize wait for all of the
 * device's work, NCCL's kernels included, and those wait for their peer
 * processes: if a peer is waiting for this one's next message, neither
 * ever finishes (NCCL's documentation warns of it; PyTorch's caching
 * allocator exists partly for it).  Here the wait would mostly end, as
 * small messages fit the sockets' buffers, so it is refused instead. */
static void refuse_device_wait(const char *fn)
{
	long n = nccl_queued.load();
	if (n <= 0)
		return;
	fprintf(stderr, "cuemu: %s while %ld NCCL operation%s of this process %s queued: on a GPU it waits for "
		"them and they for their peers, a deadlock when a peer waits for this process; free in stream "
		"order (cudaFreeAsync) or after they are done\n", fn, n, n == 1 ? "" : "s", n == 1 ? "is" : "are");
	abort();
}

} /* namespace cuemu */

using cuemu::in;

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
	cuemu::refuse_device_wait("cudaDeviceSynchronize");
	cuemu::sync_all();
	return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t bytes)
{
	*p = NULL;
	if (!device_count())
		return ret(cudaErrorNoDevice);
	int d = current_device;
	if ((long long)bytes < 0 || allocated[d] + (long long)bytes > (long long)DEVICE_BYTES)
		return ret(cudaErrorMemoryAllocation);
	void *m = NULL;
	if (posix_memalign(&m, 256, sizeof(alloc_head) + bytes))
		return ret(cudaErrorMemoryAllocation);
	alloc_head *h = (alloc_head *)m;
	h->magic = ALLOC_MAGIC;
	h->bytes = bytes;
	h->device = d;
	/* fresh device memory holds garbage: NaN bytes make a read before a
	 * write show */
	memset(h + 1, 0xff, bytes);
	allocated[d] += (long long)bytes;
	*p = h + 1;
	std::lock_guard<std::mutex> lk(cuemu::mem_m);
	cuemu::device_mem[(uintptr_t)*p] = bytes;
	return cudaSuccess;
}

static void release(void *p)
{
	alloc_head *h = (alloc_head *)p - 1;
	h->magic = 0;
	allocated[h->device] -= (long long)h->bytes;
	free(h);
}

/* p's bookkeeping gone: false if it is no allocation of ours */
static bool forget(void *p)
{
	std::lock_guard<std::mutex> lk(cuemu::mem_m);
	auto it = cuemu::device_mem.find((uintptr_t)p);
	if (it == cuemu::device_mem.end())
		return false;
	cuemu::device_mem.erase(it);
	return true;
}

EXPORT cudaError_t cudaFree(void *p)
{
	if (!p)
		return cudaSuccess;
	/* as the driver does: cudaFree waits for the device's work */
	cuemu::refuse_device_wait("cudaFree");
	if (!forget(p))
		return ret(cudaErrorInvalidDevicePointer);
	cuemu::sync_all();
	release(p);
	return cudaSuccess;
}

/* The stream-ordered allocator: the memory is taken at once (as from a
 * pool that has it) and given back when stream s reaches the free; neither
 * waits for the device. */
EXPORT cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s)
{
	(void)s;
	return cudaMalloc(p, bytes);
}

EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	if (!p)
		return cudaSuccess;
	if (!forget(p))
		return ret(cudaErrorInvalidDevicePointer);
	cuemu::enqueue(s, [p] { release(p); });
	return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device)
{
	if (device < 0 || device >= device_count())
		return ret(cudaErrorInvalidDevice);
	switch (attr) {
	case cudaDevAttrMemoryPoolsSupported:
		*value = getenv("PH_CUEMU_NO_POOLS") ? 0 : 1;
		return cudaSuccess;
	default:
		return ret(cudaErrorInvalidValue);
	}
}

EXPORT cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	*p = malloc(bytes ? bytes : 1);
	if (!*p)
		return ret(cudaErrorMemoryAllocation);
	std::lock_guard<std::mutex> lk(cuemu::mem_m);
	cuemu::pinned_mem[(uintptr_t)*p] = bytes;
	return cudaSuccess;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	(void)flags;
	return cudaMallocHost(p, bytes);
}

EXPORT cudaError_t cudaFreeHost(void *p)
{
	if (!p)
		return cudaSuccess;
	{
		std::lock_guard<std::mutex> lk(cuemu::mem_m);
		if (!cuemu::pinned_mem.erase((uintptr_t)p))
			return ret(cudaErrorInvalidValue);
	}
	cuemu::sync_all();
	free(p);
	return cudaSuccess;
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	*total = DEVICE_BYTES;
	*free_bytes = DEVICE_BYTES - (size_t)allocated[current_device].load();
	return cudaSuccess;
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
	if ((unsigned)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	if (bytes && (!dst || !src))
		return ret(cudaErrorInvalidValue);
	memmove(dst, src, bytes);
	return cudaSuccess;
}

/* As the driver: a copy from pageable host memory returns once the source
 * is staged (here: copied aside at once); a copy to pageable host memory
 * returns when it has landed; a copy between device and pinned memory is
 * queued like a kernel, so the host must synchronise before reading. */
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s)
{
	if ((unsigned)kind > cudaMemcpyDefault)
		return ret(cudaErrorInvalidMemcpyDirection);
	if (!bytes)
		return cudaSuccess;
	if (!dst || !src)
		return ret(cudaErrorInvalidValue);
	if (!s || cuemu::stream_mode() == cuemu::S_SYNC) {
		memmove(dst, src, bytes);
		return cudaSuccess;
	}
	bool src_dev = in(cuemu::device_mem, src), dst_dev = in(cuemu::device_mem, dst);
	bool src_pageable = !src_dev && !in(cuemu::pinned_mem, src);
	bool dst_pageable = !dst_dev && !in(cuemu::pinned_mem, dst);
	if (src_pageable) {
		std::shared_ptr<std::vector<char>> staged = std::make_shared<std::vector<char>>((const char *)src,
											  (const char *)src + bytes);
		cuemu::push(s, [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
	} else {
		cuemu::push(s, [dst, src, bytes] { memmove(dst, src, bytes); });
	}
	if (dst_pageable)
		cuemu::sync_stream(s);
	return cudaSuccess;
}

EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t bytes, cudaStream_t s)
{
	(void)dd;
	(void)sd;
	return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
}

EXPORT cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
	if (bytes && !p)
		return ret(cudaErrorInvalidValue);
	memset(p, value, bytes);
	return cudaSuccess;
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
	if (bytes && !p)
		return ret(cudaErrorInvalidValue);
	cuemu::enqueue(s, [p, value, bytes] { memset(p, value, bytes); });
	return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	CUstream_st *st = new CUstream_st();
	st->device = current_device;
	st->worker = std::thread(cuemu::stream_loop, st);
	std::lock_guard<std::mutex> lk(cuemu::streams_m);
	cuemu::streams.push_back(st);
	*s = st;
	return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	if (!s)
		return ret(cudaErrorInvalidResourceHandle);
	/* its queued work still runs (as on a GPU), then the thread ends */
	{
		std::lock_guard<std::mutex> lk(s->m);
		if (s->stop)
			return ret(cudaErrorInvalidResourceHandle);
		s->stop = true;
		s->cv.notify_all();
	}
	s->worker.join();
	return cudaSuccess;
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	if (s)
		cuemu::sync_stream(s);
	return cudaSuccess;
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t s)
{
	if (!s)
		return cudaSuccess;
	std::lock_guard<std::mutex> lk(s->m);
	if (s->queued > s->flush)
		s->flush = s->queued;
	s->cv.notify_all();
	return s->done >= s->queued ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	CUevent_st *ev = new CUevent_st();
	ev->device = current_device;
	ev->stream = NULL;
	ev->seq = 0;
	*e = ev;
	return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	delete e;
	return cudaSuccess;
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	/* as on a GPU: an event is recorded on streams of its own device */
	if (s && s->device != e->device)
		return ret(cudaErrorInvalidResourceHandle);
	std::lock_guard<std::mutex> lk(e->m);
	if (!s || cuemu::stream_mode() == cuemu::S_SYNC) {
		e->stream = NULL;
		e->seq = 0;
	} else {
		e->stream = s;
		e->seq = cuemu::push(s, [] {});
	}
	return cudaSuccess;
}

/* Where e was last recorded, as of now (what a wait or a query refers to). */
static void event_target(cudaEvent_t e, CUstream_st **s, uint64_t *seq)
{
	std::lock_guard<std::mutex> lk(e->m);
	*s = e->stream;
	*seq = e->seq;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
	(void)flags;
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	CUstream_st *from;
	uint64_t seq;
	event_target(e, &from, &seq);
	if (!from || from == s)
		return cudaSuccess;
	if (!s || cuemu::stream_mode() == cuemu::S_SYNC)
		cuemu::wait_stream(from, seq);
	else
		cuemu::push(s, [from, seq] { cuemu::wait_stream(from, seq); });
	return cudaSuccess;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	CUstream_st *from;
	uint64_t seq;
	event_target(e, &from, &seq);
	cuemu::wait_stream(from, seq);
	return cudaSuccess;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
	if (!e)
		return ret(cudaErrorInvalidResourceHandle);
	CUstream_st *from;
	uint64_t seq;
	event_target(e, &from, &seq);
	if (!from)
		return cudaSuccess;
	cuemu::nudge_stream(from, seq);
	std::lock_guard<std::mutex> lk(from->m);
	return from->done >= seq ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	(void)a;
	(void)b;
	*ms = 0;
	return cudaSuccess;
}
