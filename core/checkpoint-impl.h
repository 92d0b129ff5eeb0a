/* SPDX-License-Identifier: MIT */
/* What the checkpoint files (checkpoint.c, checkpoint-id.c,
 * checkpoint-state.c, checkpoint-manifest.c, checkpoint-files.c) share:
 * the names inside a checkpoint dir, and the helpers one file makes for
 * another.  Not installed; checkpoint.h is the interface. */
#ifndef PH_CORE_CHECKPOINT_IMPL_H
#define PH_CORE_CHECKPOINT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "checkpoint.h"

#define WEIGHTS_FILE "weights.safetensors"
#define OPTIM_FILE "optimizer.safetensors"
#define STATE_FILE "state.json"
#define MANIFEST_FILE "manifest.txt"
#define MANIFEST_MAGIC "pipehost-checkpoint-manifest 1"
#define MANIFEST_MAX 65536
#define DAMAGED_PREFIX "damaged-"
#define STEP_PREFIX "step-"
#define TMP_PREFIX ".tmp-"

/* checkpoint-sbuf.c: a growing string; oom set once an append failed. */
typedef struct {
	char *s;
	size_t len, cap;
	int oom;
} ph_ck_sbuf;

void ph_ck_printf(ph_ck_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* checkpoint-files.c */

/* Open a file of a step for reading without ever blocking: open(2) with
 * O_NONBLOCK (a named pipe nobody writes would block it for ever), then
 * fstat on the descriptor; anything but a regular file (a FIFO, a socket,
 * a device, a directory) is refused with one line naming it, as damage.
 * The descriptor is blocking again on return; *st is its fstat.
 * *missing (may be NULL) is set when there is no such file at all. */
int ph_ck_open_read(const char *path, int *fd, struct stat *st, int *missing, ph_err *err);

/* Is a step's load failing with rc damage to the step (a file missing,
 * malformed, or not what its manifest says: PH_EINVAL and the like), for
 * which a resume passes it over to an older step and sets it aside?  Not
 * PH_EIO (a read the system failed, a file changing while read) nor
 * PH_ENOMEM: the step may be sound, and the run stops instead. */
static inline int ph_ck_is_damage(int rc)
{
	return rc != PH_EIO && rc != PH_ENOMEM;
}
/* Every DIR/step-N entry is a directory: a file, a FIFO, a socket or a
 * device under a step's name is refused (a save would fail on it after
 * training, and it is no checkpoint). */
int ph_ck_check_entries(const char *dir, ph_err *err);

/* Write a small file crash-safely: temp name, fsync, rename. */
int ph_ck_write_file_atomic(const char *path, const char *data, size_t len, ph_err *err);
/* mkdir -p, for [checkpoint] dir */
int ph_ck_make_dirs(const char *dir, ph_err *err);
/* rm -rf of a directory of ours (no symlinks followed). */
int ph_ck_remove_tree(const char *path);
/* "step-00000120" -> 120; -1 if the name is not exactly step-DIGITS. */
int64_t ph_ck_parse_step_name(const char *name);

typedef struct {
	int64_t step;
	char name[64];
} ph_ck_step;

/* Complete step directories of dir, highest first.  *out malloc'd. */
int ph_ck_list_steps(const char *dir, ph_ck_step **out, int *n, ph_err *err);
/* Remove leftovers of interrupted saves and deletions. */
void ph_ck_remove_stale(const char *dir);
/* Keep `just` and the keep - 1 highest steps below it; remove the other
 * steps below it.  Steps above `just` (a resumed run's earlier
 * continuation, replaced as the run reaches them) stay. */
void ph_ck_apply_keep(const char *dir, int keep, int64_t just);
/* Move dir/name out of view as dir/damaged-name (never deleted); to is
 * where it went, "" if it could not be moved. */
void ph_ck_set_aside(const char *dir, const char *name, char *to, size_t len);

/* checkpoint-state.c */

/* state.json's text for a step, malloc'd; NULL when out of memory. */
char *ph_ck_state_json(int64_t step, const ph_ckpt_id *id, int64_t seed, int64_t total_steps, const char *optimizer,
			int eval_pending);
int ph_ck_read_state_file(const char *path, ph_ckpt_state *st, ph_err *err);

/* checkpoint-manifest.c */

typedef struct {
	char run[33];
	int64_t step;
	int n;
	struct {
		char name[64];
		uint64_t size, hash;
	} f[8];
} ph_ck_manifest;

/* The manifest of step dir sdir: names[i] of sizes[i] bytes hashing to
 * hashes[i], the step and the run, and a last line checking the rest. */
int ph_ck_write_manifest(const char *sdir, const char *run, int64_t step, const char *const *names,
			 const uint64_t *sizes, const uint64_t *hashes, int n, ph_err *err);
/* Read and check sdir/manifest.txt.  *missing is set (and PH_EIO returned)
 * when there is none at all. */
int ph_ck_read_manifest(const char *sdir, ph_ck_manifest *m, int *missing, ph_err *err);
/* Each file's size and checksum against the manifest. */
int ph_ck_verify_files(const char *sdir, const ph_ck_manifest *m, ph_err *err);

/* The checks every reader of step directory sdir makes before its tensors:
 * STATE_FILE read into *st and of the step the directory's name says (a
 * failure there is returned, and *st needs no freeing; else the caller
 * frees it); the manifest read, each of need's names (NULL-terminated)
 * listed in it, and every byte of those files verified.  A manifest
 * failure is not returned but left in *mrc and merr, so that a caller can
 * first say a finer thing (a checkpoint of another model); *missing: there
 * is no manifest at all (an older pipehost's), *mrc then PH_EIO. */
int ph_ck_open_step(const char *sdir, const char *const *need, ph_ckpt_state *st, ph_ck_manifest *m,
		    int *missing, int *mrc, ph_err *merr, ph_err *err);

#endif
