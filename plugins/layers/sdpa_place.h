/* SPDX-License-Identifier: MIT */
/*
 * sdpa_place.h: where cuDNN's fused attention (cudnn_sdpa.cu) puts its
 * bf16 copies, statistic and workspace: in free device memory the caller
 * names, up to PH_SDPA_SPANS spans of it.  Plain C on addresses (no CUDA),
 * so tests/test-transformer checks it on the CPU.
 *
 * Why a placement and not a cut from the front: the deterministic backward's
 * workspace is by far the largest block (on Hopper, dP: B*H*T*T*2 bytes,
 * cudnn-frontend 1.32's default for the deterministic algorithm), and it fits only the largest span; cut in call order,
 * the copies took that span's front first and the backward ran over groups
 * of 2 samples where 4 fit (GPT-2 small, 8 x 1024: half the blocks a launch
 * on 132 SMs).
 */
#ifndef PH_LAYERS_SDPA_PLACE_H
#define PH_LAYERS_SDPA_PLACE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Free device memory a call may use. */
typedef struct {
	void *p;
	size_t bytes;
} ph_sdpa_span;

#define PH_SDPA_SPANS 4  /* spans a caller may name */
#define PH_SDPA_BLOCKS 8 /* blocks a call places */
#define PH_SDPA_ALIGN 256 /* each block's alignment (cuDNN asks 16) */

/*
 * Places block i (sizes[i] bytes, PH_SDPA_ALIGN-aligned) for every i < n:
 * the largest first, each in the span with the least room left that holds
 * it (best fit).  at[i] is its address, NULL where sizes[i] is 0.  Returns
 * 1 if all fit, 0 if not (at[] then means nothing).  The spans are not
 * changed.
 */
static inline int ph_sdpa_place(const ph_sdpa_span *spans, int nspans, const size_t *sizes, int n, void **at)
{
	ph_sdpa_span s[PH_SDPA_SPANS];
	int order[PH_SDPA_BLOCKS];
	if (nspans < 0 || nspans > PH_SDPA_SPANS || n < 0 || n > PH_SDPA_BLOCKS)
		return 0;
	for (int j = 0; j < nspans; j++)
		s[j] = spans[j];
	for (int i = 0; i < n; i++) { /* insertion sort, largest first, ties in call order */
		int k = i;
		for (; k > 0 && sizes[order[k - 1]] < sizes[i]; k--)
			order[k] = order[k - 1];
		order[k] = i;
	}
	for (int k = 0; k < n; k++) {
		const int i = order[k];
		at[i] = NULL;
		if (sizes[i] == 0)
			continue;
		int best = -1;
		size_t best_room = 0;
		for (int j = 0; j < nspans; j++) {
			const uintptr_t p = (uintptr_t)s[j].p;
			const size_t skip = (size_t)(((p + PH_SDPA_ALIGN - 1) & ~(uintptr_t)(PH_SDPA_ALIGN - 1)) - p);
			if (s[j].bytes < skip || s[j].bytes - skip < sizes[i])
				continue;
			const size_t room = s[j].bytes - skip - sizes[i];
			if (best < 0 || room < best_room) {
				best = j;
				best_room = room;
			}
		}
		if (best < 0)
			return 0;
		const uintptr_t p = (uintptr_t)s[best].p;
		const uintptr_t a = (p + PH_SDPA_ALIGN - 1) & ~(uintptr_t)(PH_SDPA_ALIGN - 1);
		at[i] = (void *)a;
		s[best].p = (void *)(a + sizes[i]);
		s[best].bytes = best_room;
	}
	return 1;
}

#ifdef __cplusplus
}
#endif
#endif
