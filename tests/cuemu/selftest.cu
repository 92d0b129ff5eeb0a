/* SPDX-License-Identifier: MIT */
/*
 * The emulator's own test (run by tests/test-cuemu.sh): kernels whose
 * results are known, written the way pipehost's are, so that a wrong
 * barrier, shuffle or launch in the emulator shows before it hides a bug in
 * a layer.  `selftest` prints one line per check and exits non-zero on a
 * failure; `selftest deadlock` must abort with the emulator's message;
 * `selftest race` prints a result that depends on the thread order (run it
 * under two PH_CUEMU_ORDER values and they must differ).
 *
 * NCCL (nccl.cc), between two processes made by fork, the id passed through
 * a pipe as mpirun's processes pass it over MPI: `selftest nccl` (with
 * PH_CUEMU_DEVICES=2) prints a line per check of each member; `selftest
 * nccl-mismatch` must abort member 0 with the emulator's message for a
 * receive of the wrong size, then member 1 with the one for a vanished
 * peer; `selftest nccl-free` must abort member 1 at a cudaFree while its
 * send is queued, after a cudaFreeAsync that passes; `selftest
 * nccl-timeout` joins alone with PH_CUEMU_NCCL_TIMEOUT=1.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <thread>

static int failed;
static void check(int ok, const char *what)
{
	printf("%s - %s\n", ok ? "ok" : "not ok", what);
	failed += !ok;
}

/* out[b] = sum of x over a shared-memory tree, 256 threads per block */
__global__ void k_tree_sum(const float *x, int n, float *out)
{
	__shared__ float sh[256];
	float s = 0;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		s += x[i];
	sh[threadIdx.x] = s;
	__syncthreads();
	for (int h = blockDim.x / 2; h > 0; h /= 2) {
		if ((int)threadIdx.x < h)
			sh[threadIdx.x] += sh[threadIdx.x + h];
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = sh[0];
}

/* per lane: xor-sum of the warp, down-shift, broadcast of lane 3 within
 * groups of 8, a ballot, and an 8-lane sub-warp sum with its own mask (as
 * layernorm's row groups do) */
__global__ void k_warp_ops(int *out)
{
	const int lane = threadIdx.x & 31;
	int s = lane;
	for (int o = 16; o; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	int down = __shfl_down_sync(0xffffffffu, lane, 1);
	int bc = __shfl_sync(0xffffffffu, lane, 3, 8);
	unsigned odd = __ballot_sync(0xffffffffu, lane & 1);
	unsigned m = 0xffu << (lane & 24);
	int g = lane;
	g += __shfl_xor_sync(m, g, 1);
	g += __shfl_xor_sync(m, g, 2);
	g += __shfl_xor_sync(m, g, 4);
	int *o = out + 5 * (blockIdx.x * blockDim.x + threadIdx.x);
	o[0] = s;
	o[1] = down;
	o[2] = bc;
	o[3] = (int)odd;
	o[4] = g;
}

/* threads past n return before the barrier; the rest must still pass it */
__global__ void k_early_exit(int *out, int n)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	__syncthreads();
	out[i] = 2 * i;
}

/* a 2-D grid of 2-D blocks: every element written once with its index */
__global__ void k_grid2d(int *out, int w, int h)
{
	int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
	if (x < w && y < h)
		out[y * w + x] += y * w + x + 1;
}

__global__ void k_deadlock(int *out)
{
	if (threadIdx.x == 0)
		__syncthreads(); /* lane 0 waits for the block ... */
	else if (threadIdx.x < 32)
		__syncwarp(); /* ... lanes 1-31 for lane 0 */
	out[0] = 1;
}

/* a race: every thread writes its index to the same word */
__global__ void k_race(int *out) { out[0] = threadIdx.x; }

/* ---------------------------------------------------------------- */
/* NCCL between two processes                                         */

__global__ void k_fill(float *x, int n, float base)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = base + (float)i;
}

__global__ void k_add(float *x, int n, float v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] += v;
}

static int blocks(int n) { return (n + 255) / 256; }

static void mcheck(int rank, int ok, const char *what)
{
	printf("%s - member %d: %s\n", ok ? "ok" : "not ok", rank, what);
	fflush(stdout);
	failed += !ok;
}

#define NOK(call) ((call) == ncclSuccess)

enum { NIDS = 4 };

/* Forks; the parent is member 0, makes the ids and writes them to the
 * child, member 1, through a pipe.  Returns the rank; *child its pid. */
static int fork_members(ncclUniqueId *ids, int nids, pid_t *child)
{
	int p[2];
	if (pipe(p)) {
		perror("pipe");
		exit(1);
	}
	fflush(stdout);
	fflush(stderr);
	*child = fork();
	if (*child < 0) {
		perror("fork");
		exit(1);
	}
	if (*child) {
		for (int i = 0; i < nids; i++)
			if (!NOK(ncclGetUniqueId(&ids[i]))) {
				printf("not ok - ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
				exit(1);
			}
		if (write(p[1], ids, nids * sizeof *ids) != (ssize_t)(nids * sizeof *ids))
			exit(1);
		close(p[1]);
		return 0;
	}
	size_t got = 0;
	while (got < nids * sizeof *ids) {
		ssize_t k = read(p[0], (char *)ids + got, nids * sizeof *ids - got);
		if (k <= 0)
			_exit(1);
		got += (size_t)k;
	}
	close(p[0]);
	return 1;
}

static ncclComm_t join(const ncclUniqueId &id, int rank)
{
	ncclComm_t c = NULL;
	if (!NOK(ncclCommInitRank(&c, 2, id, rank))) {
		printf("not ok - member %d: ncclCommInitRank: %s\n", rank, ncclGetLastError(NULL));
		exit(1);
	}
	return c;
}

/* (a) three messages of different sizes from member 0 to member 1: the
 * first two filled by kernels queued before the sends (lazy streams run
 * them only because the send runs), the second sent from a side stream
 * after an event, as pipehost's stage links do; the receiver's kernel
 * after the receives sees the bytes. */
static void nccl_messages(int rank, ncclComm_t c, cudaStream_t s, cudaStream_t side)
{
	const int sizes[3] = { 1, 1000, 300000 };
	float *m[3];
	for (int k = 0; k < 3; k++)
		cudaMalloc((void **)&m[k], sizes[k] * sizeof(float));
	if (rank == 0) {
		cudaEvent_t ev;
		cudaEventCreate(&ev);
		for (int k = 0; k < 2; k++)
			k_fill<<<blocks(sizes[k]), 256, 0, s>>>(m[k], sizes[k], 1000.f * k);
		for (int i = 0; i < sizes[2]; i++)
			m[2][i] = 2000.f + i;
		cudaEventRecord(ev, s);
		cudaStreamWaitEvent(side, ev, 0);
		int ok = NOK(ncclSend(m[0], sizes[0], ncclFloat, 1, c, s)) && NOK(ncclSend(m[1], sizes[1], ncclFloat, 1, c, side)) &&
			 NOK(ncclSend(m[2], sizes[2], ncclFloat, 1, c, s));
		cudaStreamSynchronize(side);
		cudaStreamSynchronize(s);
		cudaEventDestroy(ev);
		mcheck(rank, ok, "3 ncclSends of 4, 4000 and 1200000 bytes, one from a side stream");
	} else {
		int ok = 1;
		for (int k = 0; k < 3; k++) {
			ok &= NOK(ncclRecv(m[k], sizes[k], ncclFloat, 0, c, s));
			k_add<<<blocks(sizes[k]), 256, 0, s>>>(m[k], sizes[k], 0.5f);
		}
		cudaStreamSynchronize(s);
		for (int k = 0; k < 3; k++)
			for (int i = 0; i < sizes[k]; i++)
				ok &= m[k][i] == 1000.f * k + i + 0.5f;
		mcheck(rank, ok, "3 ncclRecvs in order, and a kernel after each sees its bytes");
	}
	for (int k = 0; k < 3; k++)
		cudaFree(m[k]);
}

/* (b) a group sending and receiving 8 MiB each way (socket buffers hold
 * far less: without concurrent progress both would block in send), and
 * 1000 floats to itself, as an all-to-all does */
static void nccl_group(int rank, ncclComm_t c, cudaStream_t s)
{
	const int n = 2 * 1024 * 1024;
	float *out, *in, *self;
	cudaMalloc((void **)&out, n * sizeof(float));
	cudaMalloc((void **)&in, n * sizeof(float));
	cudaMalloc((void **)&self, 1000 * sizeof(float));
	for (int i = 0; i < n; i++)
		out[i] = (float)(rank * 3 + i % 4099);
	int ok = NOK(ncclGroupStart()) && NOK(ncclSend(out, n, ncclFloat, 1 - rank, c, s)) &&
		 NOK(ncclRecv(in, n, ncclFloat, 1 - rank, c, s)) && NOK(ncclSend(out + 7, 1000, ncclFloat, rank, c, s)) &&
		 NOK(ncclRecv(self, 1000, ncclFloat, rank, c, s)) && NOK(ncclGroupEnd());
	cudaStreamSynchronize(s);
	for (int i = 0; i < n; i++)
		ok &= in[i] == (float)((1 - rank) * 3 + i % 4099);
	for (int i = 0; i < 1000; i++)
		ok &= self[i] == out[7 + i];
	mcheck(rank, ok, "a group of 8 MiB each way at once and 4000 bytes to itself");
	cudaFree(out);
	cudaFree(in);
	cudaFree(self);
}

static float contribution(int rank, int i) { return (rank ? 0.25f : 1.5f) * (float)(i % 977) + (float)rank; }

/* (c) sums: floats in place, exactly; int32 max out of place.  (d) an
 * all-gather in place; (e) a broadcast from member 1. */
static void nccl_collectives(int rank, ncclComm_t c, cudaStream_t s)
{
	const int n = 100000;
	float *g, *all;
	int *x, *mx;
	cudaMalloc((void **)&g, n * sizeof(float));
	cudaMalloc((void **)&all, 2 * n * sizeof(float));
	cudaMalloc((void **)&x, n * sizeof(int));
	cudaMalloc((void **)&mx, n * sizeof(int));
	for (int i = 0; i < n; i++) {
		g[i] = contribution(rank, i);
		x[i] = rank ? i : n - i;
	}
	int ok = NOK(ncclAllReduce(g, g, n, ncclFloat, ncclSum, c, s)) &&
		 NOK(ncclAllReduce(x, mx, n, ncclInt32, ncclMax, c, s));
	cudaStreamSynchronize(s);
	int okmax = ok;
	for (int i = 0; i < n; i++) {
		ok &= g[i] == contribution(0, i) + contribution(1, i);
		okmax &= mx[i] == (i > n - i ? i : n - i) && x[i] == (rank ? i : n - i);
	}
	mcheck(rank, ok, "ncclAllReduce of 100000 floats in place: every sum exact");
	mcheck(rank, okmax, "ncclAllReduce ncclMax of int32, out of place");

	float *mine = all + (size_t)rank * n;
	k_fill<<<blocks(n), 256, 0, s>>>(mine, n, 10.f * rank);
	ok = NOK(ncclAllGather(mine, all, n, ncclFloat, c, s));
	cudaStreamSynchronize(s);
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < n; i++)
			ok &= all[(size_t)r * n + i] == 10.f * r + i;
	mcheck(rank, ok, "ncclAllGather in place, in member order");

	k_fill<<<blocks(n), 256, 0, s>>>(g, n, rank ? 7.f : -1.f);
	ok = NOK(ncclBroadcast(g, all, n, ncclFloat, 1, c, s));
	cudaStreamSynchronize(s);
	for (int i = 0; i < n; i++)
		ok &= all[i] == 7.f + i;
	mcheck(rank, ok, "ncclBroadcast from member 1");
	cudaFree(g);
	cudaFree(all);
	cudaFree(x);
	cudaFree(mx);
}

/* (f) what the calls refuse: nothing of a refused group may be sent (the
 * sum after it would find a stray message and abort) */
static void nccl_refusals(int rank, ncclComm_t c, cudaStream_t s, cudaStream_t side)
{
	float *b;
	cudaMalloc((void **)&b, 16 * sizeof(float));
	int ok = ncclSend(b, 4, ncclFloat, 5, c, s) == ncclInvalidArgument && strstr(ncclGetLastError(c), "peer 5");
	ok &= ncclAllReduce(b, b, 4, (ncclDataType_t)42, ncclSum, c, s) == ncclInvalidArgument;
	mcheck(rank, ok, "a peer or a type out of range: ncclInvalidArgument, with the reason");
	ok = NOK(ncclGroupStart()) && NOK(ncclSend(b, 4, ncclFloat, 1 - rank, c, s)) &&
	     ncclRecv(b + 4, 4, ncclFloat, 1 - rank, c, side) == ncclInvalidUsage && ncclGroupEnd() == ncclInvalidUsage;
	ok &= NOK(ncclGroupStart()) && ncclAllReduce(b, b, 4, ncclFloat, ncclSum, c, s) == ncclInvalidUsage &&
	      ncclGroupEnd() == ncclInvalidUsage;
	b[8] = 1.f + rank;
	ok &= NOK(ncclAllReduce(b + 8, b + 9, 1, ncclFloat, ncclSum, c, s));
	cudaStreamSynchronize(s);
	ok &= b[9] == 3.f;
	mcheck(rank, ok, "a group over two streams, a sum inside a group: ncclInvalidUsage, and nothing sent");
	cudaFree(b);
}

/* (g) two more communicators, each driven by a thread of its own at the
 * same time, as pipehost's host threads (one per pipeline rank) do */
static void nccl_threads(int rank, const ncclUniqueId *ids)
{
	int oks[2] = { 1, 1 };
	float *vs[2];
	std::thread t[2];
	for (int k = 0; k < 2; k++)
		t[k] = std::thread([&, k] {
			cudaSetDevice(rank);
			ncclComm_t c = join(ids[1 + k], rank);
			cudaStream_t s;
			cudaStreamCreate(&s);
			float *v;
			const int n = 5000;
			cudaMalloc((void **)&v, 2 * n * sizeof(float));
			for (int it = 0; it < 20; it++) {
				for (int i = 0; i < n; i++)
					v[i] = (float)(rank + k + it + i);
				oks[k] &= NOK(ncclAllReduce(v, v, n, ncclFloat, ncclSum, c, s));
				oks[k] &= NOK(ncclGroupStart()) && NOK(ncclSend(v, n, ncclFloat, 1 - rank, c, s)) &&
					  NOK(ncclRecv(v + n, n, ncclFloat, 1 - rank, c, s)) && NOK(ncclGroupEnd());
				cudaStreamSynchronize(s);
				for (int i = 0; i < n; i++)
					oks[k] &= v[i] == (float)(1 + 2 * (k + it + i)) && v[n + i] == v[i];
			}
			vs[k] = v;
			cudaStreamDestroy(s);
			oks[k] &= NOK(ncclCommDestroy(c));
		});
	for (int k = 0; k < 2; k++)
		t[k].join();
	/* not in the threads: a cudaFree waits for the device, the other
	 * thread's NCCL operations included (the emulator refuses it) */
	for (int k = 0; k < 2; k++)
		cudaFree(vs[k]);
	mcheck(rank, oks[0] && oks[1], "two communicators used by two threads at once, 20 rounds each");
}

static int nccl_member(int rank, const ncclUniqueId *ids)
{
	cudaSetDevice(rank);
	ncclComm_t c = join(ids[0], rank);
	int v = 0, n = 0, d = -1, me = -1;
	mcheck(rank,
	       NOK(ncclGetVersion(&v)) && v == NCCL_VERSION_CODE && NOK(ncclCommCount(c, &n)) && n == 2 &&
		       NOK(ncclCommCuDevice(c, &d)) && d == rank && NOK(ncclCommUserRank(c, &me)) && me == rank,
	       "joined: version, members, device and rank");
	cudaStream_t s, side;
	cudaStreamCreate(&s);
	cudaStreamCreate(&side);
	nccl_messages(rank, c, s, side);
	nccl_group(rank, c, s);
	nccl_collectives(rank, c, s);
	nccl_refusals(rank, c, s, side);
	nccl_threads(rank, ids);

	/* (h) NCCL refuses two members on one GPU */
	cudaSetDevice(0);
	ncclComm_t dup = NULL;
	mcheck(rank, ncclCommInitRank(&dup, 2, ids[3], rank) == ncclInvalidUsage && !dup &&
			     strstr(ncclGetLastError(NULL), "Duplicate GPU"),
	       "two members on cuda:0: ncclInvalidUsage, Duplicate GPU");
	cudaSetDevice(rank);
	mcheck(rank, NOK(ncclCommDestroy(c)), "ncclCommDestroy");
	cudaStreamDestroy(s);
	cudaStreamDestroy(side);
	return failed;
}

static int nccl_main(void)
{
	ncclUniqueId ids[NIDS];
	pid_t child;
	int rank = fork_members(ids, NIDS, &child);
	int bad = nccl_member(rank, ids);
	if (rank == 1)
		_exit(bad ? 1 : 0);
	int st = 0;
	waitpid(child, &st, 0);
	mcheck(1, WIFEXITED(st) && WEXITSTATUS(st) == 0, "exited 0");
	return failed != 0;
}

/* Member 1 sends 4096 bytes where member 0 receives 2048: member 0 must
 * abort with the emulator's line, and member 1, whose send waits for the
 * receive to take it (as NCCL's of more than its buffers hold), must abort
 * saying member 0 is gone. */
static int nccl_mismatch(void)
{
	ncclUniqueId id;
	pid_t child;
	int rank = fork_members(&id, 1, &child) ? 0 : 1; /* the child is member 0 */
	cudaSetDevice(rank);
	ncclComm_t c = join(id, rank);
	cudaStream_t s;
	cudaStreamCreate(&s);
	float *b;
	cudaMalloc((void **)&b, 1024 * sizeof(float));
	if (rank == 0) {
		ncclRecv(b, 512, ncclFloat, 1, c, s);
		cudaStreamSynchronize(s);
		printf("member 0: the receive of the wrong size returned\n");
		_exit(0);
	}
	ncclSend(b, 1024, ncclFloat, 0, c, s);
	cudaStreamSynchronize(s);
	int st = 0;
	waitpid(child, &st, 0);
	printf("member 1: the send to a vanished member returned; member 0 ended: %s %d\n",
	       WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	return 0;
}

/* Member 1 frees memory while its send to member 0 is queued, member 0
 * not yet receiving (it waits for member 1 to end): cudaFreeAsync must
 * pass, cudaFree must abort with the emulator's line, since on a GPU it
 * would wait for the send and so for member 0. */
static int nccl_free(void)
{
	int hold[2];
	if (pipe(hold)) {
		perror("pipe");
		return 1;
	}
	ncclUniqueId id;
	pid_t child;
	int rank = fork_members(&id, 1, &child) ? 0 : 1; /* the child is member 0 */
	cudaSetDevice(rank);
	ncclComm_t c = join(id, rank);
	cudaStream_t s;
	cudaStreamCreate(&s);
	float *b, *x, *y;
	cudaMalloc((void **)&b, 1024 * sizeof(float));
	if (rank == 0) {
		char ch;
		close(hold[1]);
		while (read(hold[0], &ch, 1) > 0) /* until member 1 is gone */
			;
		_exit(0);
	}
	close(hold[0]);
	cudaMalloc((void **)&x, 64);
	cudaMalloc((void **)&y, 64);
	ncclSend(b, 1024, ncclFloat, 0, c, s);
	printf("%s - cudaFreeAsync with a send queued\n", cudaFreeAsync(x, s) == cudaSuccess ? "ok" : "not ok");
	fflush(stdout);
	cudaFree(y);
	printf("not ok - cudaFree with a send queued returned\n");
	return 1;
}

/* Member 0 of 2 alone: ncclCommInitRank gives up after
 * PH_CUEMU_NCCL_TIMEOUT=1 second with ncclSystemError. */
static int nccl_timeout(void)
{
	ncclUniqueId id;
	ncclComm_t c = NULL;
	setenv("PH_CUEMU_NCCL_TIMEOUT", "1", 1);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ok = NOK(ncclGetUniqueId(&id)) && ncclCommInitRank(&c, 2, id, 0) == ncclSystemError && !c;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	const char *why = ncclGetLastError(NULL);
	printf("%s\n", why);
	mcheck(0, ok && dt >= 1.0 && dt < 4.0 && strstr(why, "waited 1 s for member(s) 1"),
	       "alone, ncclCommInitRank gives up after PH_CUEMU_NCCL_TIMEOUT with ncclSystemError");
	struct stat sb;
	mcheck(0, stat(id.internal + sizeof "cuemu-nccl", &sb) < 0 && errno == ENOENT, "and removes its rendezvous directory");
	return failed != 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "nccl"))
		return nccl_main();
	if (argc > 1 && !strcmp(argv[1], "nccl-mismatch"))
		return nccl_mismatch();
	if (argc > 1 && !strcmp(argv[1], "nccl-free"))
		return nccl_free();
	if (argc > 1 && !strcmp(argv[1], "nccl-timeout"))
		return nccl_timeout();
	int *ib;
	float *fb;
	if (cudaMalloc((void **)&ib, 4096 * sizeof(int)) != cudaSuccess ||
	    cudaMalloc((void **)&fb, 4096 * sizeof(float)) != cudaSuccess) {
		printf("not ok - cudaMalloc\n");
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "deadlock")) {
		k_deadlock<<<1, 64>>>(ib);
		printf("the deadlock was not caught\n");
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "race")) {
		k_race<<<1, 128>>>(ib);
		printf("%d\n", ib[0]);
		return 0;
	}

	check(isnan(fb[7]), "fresh device memory reads as NaN, not zeros");

	for (int i = 0; i < 1000; i++)
		fb[i] = (float)i;
	float *sums = fb + 2048;
	k_tree_sum<<<3, 256>>>(fb, 1000, sums);
	check(cudaGetLastError() == cudaSuccess && sums[0] == 499500.f && sums[2] == 499500.f,
	      "shared-memory tree sum with __syncthreads (3 blocks)");

	k_warp_ops<<<2, 64>>>(ib);
	int ok = 1;
	for (int t = 0; t < 128; t++) {
		int lane = t & 31, *o = ib + 5 * t, base8 = lane & 24;
		ok &= o[0] == 496;
		ok &= o[1] == (lane < 31 ? lane + 1 : lane);
		ok &= o[2] == (lane & ~7) + 3;
		ok &= o[3] == (int)0xaaaaaaaau;
		ok &= o[4] == 8 * base8 + 28;
	}
	check(ok, "shuffles (xor, down, width 8), ballot and 8-lane masks over 4 warps");

	memset(ib, 0, 4096 * sizeof(int));
	k_early_exit<<<2, 96>>>(ib, 150);
	ok = cudaGetLastError() == cudaSuccess;
	for (int i = 0; i < 192; i++)
		ok &= ib[i] == (i < 150 ? 2 * i : 0);
	check(ok, "threads that return early do not hold __syncthreads");

	memset(ib, 0, 4096 * sizeof(int));
	k_grid2d<<<dim3(3, 5), dim3(16, 8)>>>(ib, 40, 37);
	ok = 1;
	for (int i = 0; i < 40 * 37; i++)
		ok &= ib[i] == i + 1;
	check(ok, "2-D grid of 2-D blocks covers every element once");

	k_tree_sum<<<1, 2048>>>(fb, 10, sums);
	check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a 2048-thread block is refused as on a GPU");
	check(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");

	cudaFree(ib);
	cudaFree(fb);
	printf("%s\n", failed ? "FAILED" : "all passed");
	return failed != 0;
}
