/* SPDX-License-Identifier: MIT */
/*
 * test-greedy: the greedy partitioner's validation test.
 *
 *     ./test-greedy ./greedy.so
 *
 * Cuts a few synthetic models (equal costs, rising costs, one heavy layer,
 * cuts allowed only here and there) and checks what the host will check of
 * the answer: the stages cover layers 0..n-1 in order, none is empty, and
 * every boundary is where a cut is allowed.  Prints one line and exits 0
 * when every case passes, 1 otherwise.  `pipehost --check-plugin` runs the
 * host's own version of these checks.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include <pipehost/plugin.h>

#define MAXN 16

static int check_case(const ph_partitioner_ops *pt, const char *what, int n, int K, const double *cost,
		      const uint8_t *cut)
{
	double bwd[MAXN], zero[MAXN] = { 0 };
	int first[MAXN + 1];
	for (int l = 0; l < n; l++)
		bwd[l] = 2 * cost[l];
	ph_partition_problem pb = { .n = n, .stages = K, .fwd_cost = cost, .bwd_cost = bwd, .param_bytes = zero,
				    .act_bytes = zero, .keep_bytes = zero, .cut_after = cut, .mem_limit = zero };
	ph_err warn = { { 0 } }, err = { { 0 } };
	if (pt->partition(NULL, &pb, first, &warn, &err)) {
		printf("FAIL %s: refused: %s\n", what, err.msg);
		return 1;
	}
	if (first[0] != 0 || first[K] != n) {
		printf("FAIL %s: stages run from layer %d to %d, not 0 to %d\n", what, first[0], first[K], n);
		return 1;
	}
	for (int k = 0; k < K; k++) {
		if (first[k + 1] <= first[k] || first[k + 1] > n) {
			printf("FAIL %s: stage %d is empty or out of order (%d..%d)\n", what, k, first[k], first[k + 1]);
			return 1;
		}
		if (k > 0 && cut && !cut[first[k] - 1]) {
			printf("FAIL %s: cut after layer %d, where no cut is allowed\n", what, first[k] - 1);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-greedy ./greedy.so\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	ph_plugin_fn fn = h ? (ph_plugin_fn)dlsym(h, PH_PLUGIN_SYMBOL) : NULL;
	if (!fn) {
		fprintf(stderr, "test-greedy: %s: %s\n", argv[1], h ? "no pipehost_plugin symbol" : dlerror());
		return 1;
	}
	const ph_partitioner_ops *pt = fn()->partitioners[0];
	double equal[MAXN], rising[MAXN], heavy[MAXN];
	uint8_t every_other[MAXN];
	for (int l = 0; l < MAXN; l++) {
		equal[l] = 1;
		rising[l] = l + 1;
		heavy[l] = l == 3 ? 20 : 1;
		every_other[l] = l % 2 == 1;
	}
	int bad = check_case(pt, "8 equal layers, 2 stages", 8, 2, equal, NULL) ||
		  check_case(pt, "12 rising layers, 3 stages", 12, 3, rising, NULL) ||
		  check_case(pt, "one heavy layer, 4 stages", 10, 4, heavy, NULL) ||
		  check_case(pt, "cuts after odd layers, 3 stages", 8, 3, equal, every_other) ||
		  check_case(pt, "as many stages as layers", 5, 5, rising, NULL);
	if (!bad)
		printf("ok: 5 models: every stage non-empty, in order, cut where allowed\n");
	return bad;
}
