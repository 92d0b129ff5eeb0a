/* SPDX-License-Identifier: MIT */
/*
 * cuts: what every partitioner plugin shares, linked into each one (a
 * libtool convenience library, not exported): where a stage may end, the
 * checks every problem passes before a partitioner reads it, and the exact
 * dynamic programmes over (stage, first layer) that pick a split.
 *
 * A split is first[0..K]: stage s is layers first[s]..first[s+1]-1, with
 * first[0] = 0, first[K] = n, every stage non-empty, and every first[s]
 * (0 < s < K) a layer the cut points let a stage start at.
 */
#ifndef PH_PARTITIONERS_CUTS_H
#define PH_PARTITIONERS_CUTS_H

#include <pipehost/plugin.h>

/* May a stage end just before layer j (i.e. after layer j-1)? */
int cuts_can_end(const ph_partition_problem *pb, int j);

/* At least 1 layer and 1 stage, no more stages than layers, and no more
 * than the cut points allow.  Errors start with "who: ". */
int cuts_check(const ph_partition_problem *pb, const char *who, ph_err *err);

/* Every a[i] finite and >= 0, and their sum finite (a sum that overflows
 * to infinity would make every split look equally bad).  `what` names the
 * values in the error ("parameter bytes"); a NULL array is an error too. */
int cuts_check_values(const ph_partition_problem *pb, const char *who, const double *a, const char *what,
		      ph_err *err);

/* The same for the layer costs: forward and backward each, and the sum
 * of both over all layers (what histogram and dp add up). */
int cuts_check_costs(const ph_partition_problem *pb, const char *who, ph_err *err);

/* The uniform split's boundaries: n/K layers a stage, the first n mod K
 * stages one more (target[0..K]). */
void cuts_uniform_target(int n, int K, int *target);

/* Extra conditions on stage s being layers i..j-1 (beyond the cut points),
 * and a per-stage value to minimise the largest of. */
typedef int (*cuts_allowed_fn)(const void *ctx, int s, int i, int j);
typedef double (*cuts_value_fn)(const void *ctx, int s, int i, int j);

/* Optional, to stop a programme's scan over a stage's end j early: 1 when
 * no end j' >= j can matter, because none is allowed or (value given) none
 * has value(s, i, j') < best.  It must hold exactly (bounds monotone in j,
 * as a prefix sum of values >= 0 is), so the tables, and the split, are
 * those of the full scan; it only saves time (dp on 4096 layers). */
typedef int (*cuts_stop_fn)(const void *ctx, cuts_value_fn value, int s, int i, int j, double best);

typedef struct {
	const ph_partition_problem *pb;
	cuts_allowed_fn allowed; /* NULL: only the cut points restrict */
	cuts_stop_fn stop;       /* NULL: every end is tried */
	const void *ctx;         /* passed to allowed() and the value functions */
	double *bt;              /* (K+1) x (n+1): cuts_bottleneck's table */
	long *dist;              /* (K+1) x (n+1): cuts_nearest's table */
	double *floor;           /* n+1: a stage's lower bounds, cuts_bottleneck's and cuts_nearest's
				  * (distances are below n * K, exact in a double) */
} cuts_dp;

/* Allocate the tables (PH_ENOMEM with "who: out of memory ..."). */
int cuts_dp_init(cuts_dp *dp, const ph_partition_problem *pb, const char *who, ph_err *err);
void cuts_dp_free(cuts_dp *dp);

/* The least possible largest value(s, i, j) over the stages of the splits
 * allowed; +inf when none is. */
double cuts_bottleneck(cuts_dp *dp, cuts_value_fn value);

/* After cuts_bottleneck(dp, value) returned opt: the earliest split that
 * reaches it, into first[]. */
void cuts_walk_bottleneck(const cuts_dp *dp, cuts_value_fn value, double opt, int *first);

/* Among the splits allowed, the one nearest target[] (least sum over
 * stages of |first[s] - target[s]|), then the earliest boundaries.
 * PH_EINTERNAL ("who: no split ...") when no split is allowed. */
int cuts_nearest(cuts_dp *dp, const int *target, int *first, const char *who, ph_err *err);

/* cuts_nearest with only the cut points restricting, tables and all. */
int cuts_nearest_allowed(const ph_partition_problem *pb, const int *target, int *first, const char *who,
			 ph_err *err);

#endif
