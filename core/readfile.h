/* SPDX-License-Identifier: MIT */
/* Opening an input file that must be a regular file: a named pipe, a
 * directory or a device given where pipehost reads a file would block
 * forever or read garbage, so it is refused with one clear line. */
#ifndef PH_CORE_READFILE_H
#define PH_CORE_READFILE_H

#include <stdio.h>
#include <sys/stat.h>

#include <pipehost/plugin.h>

/* "a named pipe (FIFO)", "a directory", ...: what a non-regular file is. */
const char *ph_file_kind(mode_t mode);

/* open(path, O_RDONLY) without blocking on a FIFO (O_NONBLOCK, then fstat,
 * then blocking reads again).  what names the file in messages ("[run]
 * init"); fix says what to give instead.  Returns the descriptor in *fd. */
int ph_open_regular(const char *path, const char *what, const char *fix, int *fd, ph_err *err);

/* The same as a FILE * opened for reading ("rb"). */
int ph_fopen_regular(const char *path, const char *what, const char *fix, FILE **f, ph_err *err);

#endif
