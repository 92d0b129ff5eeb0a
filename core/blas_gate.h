/* SPDX-License-Identifier: MIT */
/* Seats for the threads of one process that call BLAS at once.
 *
 * OpenBLAS keeps a fixed pool of work buffers, twice the MAX_THREADS it was
 * built for (NUM_BUFFERS in its driver/others/memory.c): every thread inside
 * a level-3 call holds one, and so does each of its own worker threads.
 * More at once and it warns "precompiled NUM_THREADS exceeded" and falls
 * back to an overflow pool that 0.3.21 (Debian 12's) crashed in once in
 * three runs of 64 stages x 16 replicas (1,024 rank threads; its OpenBLAS
 * was built for 64).  So when a process runs more BLAS-calling threads
 * than its OpenBLAS was built for, each CPU layer call takes one of
 * MAX_THREADS seats first (layer_call.c), and gives it back while it waits
 * on its peers inside the call (a mixture of experts' all-to-all,
 * engine-group.c), so that a seat is never held by a thread that waits on
 * one that has none.  Below that count there is no gate and no cost but a
 * load and a branch a call.
 *
 * The seats change when a call runs, never what it computes: results stay
 * bitwise the same. */
#ifndef PH_CORE_BLAS_GATE_H
#define PH_CORE_BLAS_GATE_H

/* MAX_THREADS of the OpenBLAS this process runs (openblas_get_config()),
 * 64 where the string does not say. */
int ph_blas_build_threads(void);

/* Called before the rank threads start, with how many of them may call
 * BLAS at once (ph_config_busy).  Opens the gate's seats if that is more
 * than ph_blas_build_threads(); returns the seats, 0 for no gate.  Called
 * again (another replica's engine, another run in the process) it keeps the
 * larger count's gate. */
int ph_blas_gate_setup(long callers);

/* Around a layer's CPU hook; they nest (a layer calling another's hook). */
void ph_blas_gate_enter(void);
void ph_blas_gate_leave(void);

/* Around a wait on other threads inside a layer call: pause gives the
 * thread's seat back and returns what resume needs to take one again. */
int ph_blas_gate_pause(void);
void ph_blas_gate_resume(int held);

#endif
