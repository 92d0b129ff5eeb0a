/* SPDX-License-Identifier: MIT */
/* Seats for BLAS-calling threads (blas_gate.h says why). */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "blas_gate.h"

static atomic_int seats;  /* 0: no gate */
static pthread_mutex_t setup_mu = PTHREAD_MUTEX_INITIALIZER;
static sem_t free_seats;
/* The nesting depth of this thread's enters that took a seat: 0 when it
 * holds none. */
static _Thread_local int held;

int ph_blas_build_threads(void)
{
	const char *cfg = openblas_get_config();
	const char *p = cfg ? strstr(cfg, "MAX_THREADS=") : NULL;
	long n = p ? strtol(p + strlen("MAX_THREADS="), NULL, 10) : 0;
	return n > 0 && n <= 1 << 20 ? (int)n : 64;
}

int ph_blas_gate_setup(long callers)
{
	int max = ph_blas_build_threads();
	pthread_mutex_lock(&setup_mu);
	if (callers > max && !atomic_load(&seats) && sem_init(&free_seats, 0, (unsigned)max) == 0)
		atomic_store(&seats, max);
	int n = atomic_load(&seats);
	pthread_mutex_unlock(&setup_mu);
	return n;
}

static void take(void)
{
	while (sem_wait(&free_seats) && errno == EINTR)
		;
}

void ph_blas_gate_enter(void)
{
	if (held) {
		held++;
		return;
	}
	if (!atomic_load_explicit(&seats, memory_order_acquire))
		return;
	take();
	held = 1;
}

void ph_blas_gate_leave(void)
{
	if (held && --held == 0)
		sem_post(&free_seats);
}

int ph_blas_gate_pause(void)
{
	int h = held;
	if (h) {
		held = 0;
		sem_post(&free_seats);
	}
	return h;
}

void ph_blas_gate_resume(int h)
{
	if (!h)
		return;
	take();
	held = h;
}
