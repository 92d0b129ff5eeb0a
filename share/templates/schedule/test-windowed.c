/* SPDX-License-Identifier: MIT */
/*
 * test-windowed: the windowed schedule's validation test.
 *
 *     ./test-windowed ./windowed.so
 *
 * For a few pipeline shapes and windows it checks what the host will
 * check before it runs a schedule: every rank runs exactly its own chunk's
 * F and B of every micro-batch once, each B after its F, and the ranks do
 * not deadlock once the host adds the sends and receives (rank r's F of a
 * micro-batch waits for rank r-1's, its B for rank r+1's B).  Prints one
 * line and exits 0 when every case passes, 1 otherwise.
 * `pipehost --check-plugin` runs the host's own version of these checks.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "windowed.h"

#define MAXP 8
#define MAXM 16

static int check_case(const ph_schedule_ops *s, int p, int m, int window)
{
	windowed_config cfg = { .window = window };
	ph_schedule_shape sh = { p, 1, m };
	ph_action acts[MAXP][4 * MAXM];
	int n[MAXP], pos[MAXP] = { 0 };
	ph_err err = { { 0 } };
	if (s->check && s->check(&cfg, &sh, &err)) {
		printf("FAIL p=%d m=%d window=%d: refused: %s\n", p, m, window, err.msg);
		return 1;
	}
	for (int r = 0; r < p; r++) {
		int seen[2][MAXM] = { { 0 } };
		if (s->generate(&cfg, &sh, r, acts[r], 4 * MAXM, &n[r], &err)) {
			printf("FAIL p=%d m=%d window=%d rank %d: %s\n", p, m, window, r, err.msg);
			return 1;
		}
		for (int k = 0; k < n[r]; k++) {
			const ph_action *a = &acts[r][k];
			if (a->chunk != r || a->mb < 0 || a->mb >= m || a->kind > PH_ACT_B || seen[a->kind][a->mb]++ ||
			    (a->kind == PH_ACT_B && !seen[PH_ACT_F][a->mb])) {
				printf("FAIL p=%d m=%d window=%d rank %d: action %d (kind %d, micro-batch %d) is out of place\n",
				       p, m, window, r, k, a->kind, a->mb);
				return 1;
			}
		}
		if (n[r] != 2 * m) {
			printf("FAIL p=%d m=%d window=%d rank %d: %d actions, want %d\n", p, m, window, r, n[r], 2 * m);
			return 1;
		}
	}
	/* Run the ranks: an F waits for the previous rank's F, a B for the next rank's B. */
	int fdone[MAXP][MAXM] = { { 0 } }, bdone[MAXP][MAXM] = { { 0 } }, left = 2 * m * p;
	while (left) {
		int moved = 0;
		for (int r = 0; r < p; r++)
			while (pos[r] < n[r]) {
				const ph_action *a = &acts[r][pos[r]];
				if (a->kind == PH_ACT_F && r > 0 && !fdone[r - 1][a->mb])
					break;
				if (a->kind == PH_ACT_B && r + 1 < p && !bdone[r + 1][a->mb])
					break;
				(a->kind == PH_ACT_F ? fdone : bdone)[r][a->mb] = 1;
				pos[r]++, left--, moved = 1;
			}
		if (!moved) {
			printf("FAIL p=%d m=%d window=%d: the ranks deadlock\n", p, m, window);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-windowed ./windowed.so\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	ph_plugin_fn fn = h ? (ph_plugin_fn)dlsym(h, PH_PLUGIN_SYMBOL) : NULL;
	if (!fn) {
		fprintf(stderr, "test-windowed: %s: %s\n", argv[1], h ? "no pipehost_plugin symbol" : dlerror());
		return 1;
	}
	const ph_schedule_ops *s = fn()->schedules[0];
	static const int cases[][3] = { { 1, 1, 1 }, { 2, 4, 2 }, { 4, 8, 3 }, { 3, 7, 7 }, { 8, 16, 1 } };
	int bad = 0, ncases = (int)(sizeof cases / sizeof cases[0]);
	for (int i = 0; i < ncases && !bad; i++)
		bad = check_case(s, cases[i][0], cases[i][1], cases[i][2]);
	if (!bad)
		printf("ok: %d shapes: every action once and in order, no deadlock\n", ncases);
	return bad;
}
