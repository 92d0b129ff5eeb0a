# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# Helpers for the tests that run pipehost under mpirun.  Source after
# tests/lib.sh; make check sets top_builddir and PIPEHOST_MPI_MODULE
# (tests/local.mk).  The flags are Open MPI's (4.x, Debian's openmpi-bin):
# a test skips where mpirun is another MPI's.
#
#	. "$top_srcdir/tests/mpi-lib.sh"
#	ph_have_mpi || skip "$ph_mpi_why"
#	ph_mpirun 2 "$PIPEHOST" -c run.ini
#
# shellcheck disable=SC2154 # $top_builddir is the test environment's

# The module the processes load: the test environment's, else the build
# tree's (core/comm.c reads PIPEHOST_MPI_MODULE).
: "${PIPEHOST_MPI_MODULE:=${top_builddir:-.}/core/mpi/.libs/pipehost-mpi.so}"
export PIPEHOST_MPI_MODULE

# ph_have_mpi: 0 when this tree built the MPI module and an Open MPI mpirun
# is on PATH; else non-zero, with the reason in $ph_mpi_why (callers skip,
# exit 77).
ph_have_mpi() {
	ph_mpi_why=
	if ! command -v mpirun >/dev/null 2>&1; then
		ph_mpi_why="no mpirun on PATH (apt-get install openmpi-bin)"
	elif ! mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
		ph_mpi_why="mpirun is not Open MPI's ($(mpirun --version 2>&1 | head -1)); these tests use its flags"
	elif [ ! -f "$PIPEHOST_MPI_MODULE" ]; then
		ph_mpi_why="no MPI module at $PIPEHOST_MPI_MODULE (configure found no MPI: install libopenmpi-dev)"
	fi
	[ -z "$ph_mpi_why" ]
}

# ph_mpirun N CMD ARGS...: CMD on N processes of this machine, set up for a
# CI container:
#  - root allowed (CI runs as root; Open MPI refuses it otherwise);
#  - --oversubscribe: more processes than cores (CI has 2), and
#    --bind-to none so oversubscribed processes are not pinned to one core;
#  - pml ob1 over btl self,vader (shared memory): no UCX, no network;
#  - vader without single-copy (CMA): containers forbid process_vm_readv
#    between processes, and large messages would fail with "Read -1";
#  - -x PIPEHOST_MPI_MODULE so the processes load the build tree's module;
#  - no warnings about network components left unused.
# mpirun adds its own lines to stderr when a process aborts (a banner, or
# now and then an ORTE_ERROR_LOG line from the race with the killed
# processes): grep a failed run's stderr for pipehost's line rather than
# counting lines.  mpirun exits with the aborting process's code.
# Under ASan (.ci/sanitize.sh) leak detection is off for these processes:
# Open MPI leaves its own allocations (hwloc, components it unloads) at
# exit, which LeakSanitizer cannot tell from ours; every other check stays.
ph_mpirun() {
	np=$1
	shift
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_rmaps_base_oversubscribe=1 \
		mpirun -np "$np" --oversubscribe --bind-to none \
		--mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none \
		--mca osc ^ucx \
		-x PIPEHOST_MPI_MODULE "$@"
}
