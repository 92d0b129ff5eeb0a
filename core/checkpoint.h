/* SPDX-License-Identifier: MIT */
/* Checkpoints: everything a run needs to continue exactly where it stopped.
 *
 *   DIR/step-00000120/weights.safetensors     LAYER.PARAM, F32
 *   DIR/step-00000120/optimizer.safetensors   LAYER.PARAM.momentum | .adam_m/.adam_v | .lion_m
 *   DIR/step-00000120/state.json              format, version, step, seed, digest
 *   DIR/step-00000120/manifest.txt            run id, step, each file's size and XXH3-64
 *
 * The manifest binds the files of a step together: every byte of every
 * file is checked against it on load (a flipped bit, a file copied from
 * another step), and its last line checks the manifest itself.  A resume
 * from DIR passes over a damaged newest step to the previous one that
 * verifies, with a WARNING line naming it.
 *
 * A directory belongs to one run: the run id (random, made by a fresh run,
 * carried on by every resume) is in each manifest; a fresh run refuses a
 * directory holding another run's checkpoints unless [checkpoint]
 * overwrite = yes, and a running pipehost holds a lock on it (runlock.h).
 * No checkpoint of non-finite weights or optimizer state is ever written.
 *
 * The data order and dropout are pure functions of (seed, step) and the
 * learning rate of the step, so the step is the whole position: a resumed
 * run ends with weights byte-identical to an uninterrupted one.
 *
 * Writing is crash-safe: a step is assembled in DIR/.tmp-step-00000120 (each
 * file written to a temp name, fsynced and renamed), the directory is
 * fsynced, renamed to DIR/step-00000120 and DIR is fsynced.  A kill at any
 * moment leaves the previous complete checkpoint or the new complete one;
 * a step-* directory only ever exists complete.  Leftover .tmp-* entries are
 * ignored by readers and removed by the next save.
 *
 * The config digest covers what gives the weights their meaning and the run
 * its trajectory, and nothing else (see ph_checkpoint_identity), so a
 * checkpoint resumes under another schedule, partition or stage count. */
#ifndef PH_CORE_CHECKPOINT_H
#define PH_CORE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "engine.h"

#define PH_CKPT_FORMAT "pipehost-checkpoint"
#define PH_CKPT_VERSION 1
#define PH_CKPT_STATE_MAX (16 << 20) /* state.json larger than this is refused */

/* What a checkpoint belongs to: canonical "key=value" lines and their
 * 64-bit FNV-1a digest in hex. */
typedef struct {
	char digest[17];
	char *text;          /* malloc'd, lines ending in '\n' */
	char run[33];        /* the run writing: 32 hex digits (manifest.txt) */
} ph_ckpt_id;

/* state.json, parsed and validated. */
typedef struct {
	int64_t step;        /* optimizer steps completed */
	int64_t seed;
	int64_t total_steps; /* the writing run's length (for people; -1 if absent) */
	char digest[17];
	char optimizer[16];  /* "sgd" | "adamw" | "lion" */
	char *identity;      /* the writer's identity text, or NULL if absent */
	int eval_pending;    /* the step's evaluation was cut short by a stop
			      * (SIGINT/SIGTERM): a resume runs it first */
} ph_ckpt_state;

/* The identity of a run: [run] seed, batch, micro_batches; every [data] key
 * but path, test_limit and test_samples, and the effective training-set
 * size; every [optimizer] key; the run's length when the learning rate is a
 * cosine (it shapes every step's rate); every layer's name, type and options
 * (not `cut`); every parameter tensor's name and shape.  Left out on
 * purpose: [partition], [schedule], [checkpoint], stages, chunks, devices,
 * threads, recompute, logging, eval and file paths ([run] init included:
 * a resumed run takes its weights from the checkpoint). */
int ph_checkpoint_identity(const ph_config *c, ph_engine *e, int64_t train_samples,
			   int64_t total_steps, ph_ckpt_id *id, ph_err *err);
void ph_checkpoint_id_free(ph_ckpt_id *id);

/* Create DIR if needed and check it is a writable directory (a file is
 * created and removed in it): called before training so a bad [checkpoint]
 * dir fails at once, not at the first save. */
int ph_checkpoint_prepare(const char *dir, ph_err *err);

/* Write DIR/step-NNNNNNNN for `step` completed steps (DIR is created if
 * needed), then, when keep > 0, delete all but the `keep` highest steps
 * (never the one just written; a failed deletion is a warning line).
 * Weights or optimizer state holding a NaN or an infinity are refused
 * before anything is written, so the last finite checkpoint stays.  path (len bytes, may be NULL) gets the
 * step directory written. */
int ph_checkpoint_save(const char *dir, int64_t step, ph_engine *e, const ph_ckpt_id *id,
		       int64_t seed, int64_t total_steps, int keep, int eval_pending, char *path, size_t len,
		       ph_err *err);

/* Resolve path_or_dir: a step directory (holds state.json) is taken as is;
 * otherwise it is a checkpoint DIR and its highest complete step is used.
 * Then validate state.json against id, and read the weights and the
 * optimizer state into the engine (every file is validated before any byte
 * is copied; after a failure the engine's contents are unspecified and it
 * must not be trained).  *step gets the completed steps, *eval_pending
 * (may be NULL) whether that step's evaluation was cut short by a stop
 * (ph_checkpoint_save's eval_pending), path the step directory used. */
int ph_checkpoint_load(const char *path_or_dir, ph_engine *e, const ph_ckpt_id *id, int aside, int64_t *step,
		       int *eval_pending, char run[33], char *path, size_t len, ph_err *err);

/* With path_or_dir a checkpoint DIR, a damaged step (any file unreadable,
 * malformed, or not what manifest.txt says) is passed over for the next
 * older one, with a WARNING line on stderr naming it and why; with aside
 * set (this run writes in DIR and holds its lock) it is renamed
 * DIR/damaged-step-N, kept, out of the way.  A step of another config ends
 * the search.  When none loads, err is the newest one's failure.  run gets
 * the checkpoint's run id ("" for one without manifest.txt, which loads
 * with a warning). */

/* 1 if path is a step directory (holds state.json). */
int ph_checkpoint_is_step(const char *path);

/* A new random run id. */
void ph_checkpoint_new_run(char run[33]);

/* The run id in sdir/manifest.txt: 1, or 0 when it cannot be read. */
int ph_checkpoint_run_of(const char *sdir, char run[33]);

/* Make DIR this run's: a fresh run refuses any step of DIR (they are
 * another run's), a resumed one any step whose manifest names another run;
 * with overwrite those steps are deleted instead, and a line says so.  An
 * empty run is filled: a new id for a fresh run; for a run resumed from a
 * step without manifest.txt, the newest run id found in DIR, or a new one. */
int ph_checkpoint_claim(const char *dir, char run[33], int fresh, int overwrite, ph_err *err);

/* The highest complete DIR/step-N: 1 found (path filled), 0 none, or a
 * negative -PH_E* code with err set (DIR unreadable). */
int ph_checkpoint_latest(const char *dir, char *path, size_t len, int64_t *step, ph_err *err);
/* The highest complete step in dir, -1 if none (or dir unreadable). */
int64_t ph_checkpoint_newest_step(const char *dir);

/* Parse and validate state.json text (len bytes, need not be terminated);
 * `where` names it in messages.  On success free st with ph_ckpt_state_free. */
int ph_checkpoint_parse_state(const char *text, size_t len, const char *where,
			      ph_ckpt_state *st, ph_err *err);
void ph_ckpt_state_free(ph_ckpt_state *st);

/* The first line where two identity texts differ, for people: "KEY = A in
 * the checkpoint, B here", "only here: LINE", ...; "" when they agree or
 * either is NULL. */
void ph_checkpoint_diff(const char *ours, const char *theirs, char *buf, size_t len);

#endif
