/* SPDX-License-Identifier: MIT */
/*
 * The emulator's own test (run by tests/test-cuemu.sh): kernels whose
 * results are known, written the way pipehost's are, so that a wrong
 * barrier, shuffle or launch in the emulator shows before it hides a bug in
 * a layer.  `selftest` prints one line per check and exits non-zero on a
 * failure; `selftest deadlock` must abort with the emulator's message;
 * `selftest race` prints a result that depends on the thread order (run it
 * under two PH_CUEMU_ORDER values and they must differ).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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

int main(int argc, char **argv)
{
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
