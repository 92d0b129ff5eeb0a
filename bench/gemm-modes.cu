/* SPDX-License-Identifier: MIT */
/*
 * gemm-modes: GPT-2 small's matrix products under each way cuBLAS can run
 * them, to decide what `precision = bf16` should store.
 *
 * pipehost keeps activations in fp32 and asks cuBLAS for
 * CUBLAS_COMPUTE_32F_FAST_16BF (fp32 in and out, bf16 inside the kernel);
 * PyTorch's autocast casts to bf16 and multiplies bf16 by bf16.  For each
 * product of one GPT-2 block and of the tied head, at M = rows per
 * micro-batch (1024: 1 sequence; 8192: the whole batch), this times:
 *
 *   fp32       fp32 data, CUBLAS_COMPUTE_32F (what precision = fp32 runs)
 *   tf32       fp32 data, CUBLAS_COMPUTE_32F_FAST_TF32
 *   fast16bf   fp32 data, CUBLAS_COMPUTE_32F_FAST_16BF (precision = bf16 today)
 *   bf16>f32   bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F
 *   bf16       bf16 A, B and C, CUBLAS_COMPUTE_32F (autocast's products)
 *   cast       one fp32 -> bf16 pass over the activation operand, the price
 *              of feeding fp32 activations to the bf16 products
 *
 * Each figure is the mean of REPS products after 3 warm-ups, timed with
 * CUDA events; TFLOP/s counts 2 M N K.  Row-major as pipehost's GEMM
 * service: C [M, N] = A [M, K] . W^T, W [N, K] (cuBLAS: C^T = W A^T).
 *
 *     bench/gemm-modes [REPS]
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                        \
	do {                                                                                            \
		cudaError_t e_ = (call);                                                                \
		if (e_ != cudaSuccess) {                                                                \
			fprintf(stderr, "gemm-modes: %s: %s\n", #call, cudaGetErrorString(e_));         \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)

typedef struct {
	const char *name;
	int N, K;
} product;

/* One GPT-2 block's forward products and the head's, per row of activations. */
static const product products[] = {
	{ "qkv   x.Wqkv^T", 2304, 768 }, { "proj  att.Wo^T", 768, 768 }, { "fc    h.Wfc^T", 3072, 768 },
	{ "fcprj g.Wproj^T", 768, 3072 }, { "head  h.E^T", 50304, 768 },
};

enum { M_FP32, M_TF32, M_FAST16BF, M_BF16_F32, M_BF16, NMODES };
static const char *mode_names[NMODES] = { "fp32", "tf32", "fast16bf", "bf16>f32", "bf16" };

__global__ static void fill_kernel(float *p, size_t n, unsigned seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		unsigned h = (unsigned)i * 2654435761u ^ seed;
		h ^= h >> 15;
		h *= 2246822519u;
		h ^= h >> 13;
		p[i] = ((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.1f;
	}
}

__global__ static void cast_kernel(const float *x, __nv_bfloat16 *y, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		y[i] = __float2bfloat16(x[i]);
}

static cublasStatus_t run(cublasHandle_t h, int mode, int M, int N, int K, const void *A, const void *W, void *C)
{
	const float one = 1.0f, zero = 0.0f;
	cudaDataType_t ab = mode >= M_BF16_F32 ? CUDA_R_16BF : CUDA_R_32F;
	cudaDataType_t c = mode == M_BF16 ? CUDA_R_16BF : CUDA_R_32F;
	cublasComputeType_t ct = mode == M_TF32       ? CUBLAS_COMPUTE_32F_FAST_TF32
				 : mode == M_FAST16BF ? CUBLAS_COMPUTE_32F_FAST_16BF
						      : CUBLAS_COMPUTE_32F;
	return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, ab, K, A, ab, K, &zero, C, c, N, ct,
			    CUBLAS_GEMM_DEFAULT);
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 20;
	if (reps < 1)
		reps = 20;
	int ngpu = 0;
	if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
		printf("gemm-modes: no CUDA device\n");
		return 77;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	const int Ms[] = { 1024, 8192 };
	size_t maxA = 8192 * 3072, maxW = 50304 * 768, maxC = (size_t)8192 * 50304;
	float *A, *W, *C;
	__nv_bfloat16 *Ab, *Wb;
	CK(cudaMalloc(&A, maxA * 4));
	CK(cudaMalloc(&W, maxW * 4));
	CK(cudaMalloc(&C, maxC * 4));
	CK(cudaMalloc(&Ab, maxA * 2));
	CK(cudaMalloc(&Wb, maxW * 2));
	fill_kernel<<<1024, 256>>>(A, maxA, 1);
	fill_kernel<<<1024, 256>>>(W, maxW, 2);
	cast_kernel<<<1024, 256>>>(A, Ab, maxA);
	cast_kernel<<<1024, 256>>>(W, Wb, maxW);
	CK(cudaDeviceSynchronize());
	cublasHandle_t h;
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "gemm-modes: cannot create a cuBLAS handle\n");
		return 1;
	}
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));

	printf("GPU: %s; mean of %d products after 3 warm-ups; ms (TFLOP/s)\n\n", prop.name, reps);
	printf("| product | M | N | K |");
	for (int m = 0; m < NMODES; m++)
		printf(" %s |", mode_names[m]);
	printf(" cast A |\n|---|---:|---:|---:|");
	for (int m = 0; m <= NMODES; m++)
		printf("---:|");
	printf("\n");
	double tot[2][NMODES + 1] = { { 0 } };
	for (int mi = 0; mi < 2; mi++)
		for (size_t p = 0; p < sizeof products / sizeof products[0]; p++) {
			const int M = Ms[mi], N = products[p].N, K = products[p].K;
			const double flop = 2.0 * M * N * K;
			printf("| %s | %d | %d | %d |", products[p].name, M, N, K);
			for (int m = 0; m <= NMODES; m++) {
				const int bf = m >= M_BF16_F32 && m < NMODES;
				float ms = 0;
				for (int it = 0; it < 3 + reps; it++) {
					if (it == 3)
						CK(cudaEventRecord(e0));
					if (m == NMODES) {
						cast_kernel<<<(unsigned)((size_t)M * K / 1024 + 1), 256>>>(A, Ab,
													  (size_t)M * K);
						CK(cudaGetLastError());
					} else if (run(h, m, M, N, K, bf ? (void *)Ab : A, bf ? (void *)Wb : W, C) !=
						   CUBLAS_STATUS_SUCCESS) {
						ms = -1;
						break;
					}
				}
				if (ms == 0) {
					CK(cudaEventRecord(e1));
					CK(cudaEventSynchronize(e1));
					CK(cudaEventElapsedTime(&ms, e0, e1));
					ms /= reps;
				}
				if (ms < 0) {
					printf(" refused |");
					continue;
				}
				tot[mi][m] += ms;
				if (m == NMODES)
					printf(" %.4f |", ms);
				else
					printf(" %.4f (%.0f) |", ms, flop / (ms * 1e-3) / 1e12);
			}
			printf("\n");
		}
	printf("\nSum over the five products (one block's forward and the head), ms:\n");
	for (int mi = 0; mi < 2; mi++) {
		printf("  M = %d:", Ms[mi]);
		for (int m = 0; m <= NMODES; m++)
			printf(" %s %.3f", m == NMODES ? "cast" : mode_names[m], tot[mi][m]);
		printf("\n");
	}
	cublasDestroy(h);
	return 0;
}
