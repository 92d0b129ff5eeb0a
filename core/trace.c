/* Chrome trace JSON (the "Trace Event Format"): one complete event ("ph":
 * "X") per op with microsecond timestamps, pid 0, tid = rank, and metadata
 * events naming each thread "rank N".  Perfetto and chrome://tracing open it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outputs.h"
#include "plan.h"
#include "trace.h"

int ph_file_commit(FILE *f, const char *tmp, const char *path, const char *what, ph_err *err)
{
	errno = 0;
	int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
	int e = errno;
	if (fclose(f) != 0 && !bad)
		bad = 1, e = errno;
	if (bad) {
		unlink(tmp);
		return ph_fail(err, PH_EIO, "cannot write the %s %s: %s", what, path, e ? strerror(e) : "I/O error");
	}
	if (rename(tmp, path)) {
		e = errno;
		unlink(tmp);
		return ph_fail(err, PH_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
	}
	return PH_OK;
}

/* "F3", "2B0" (chunk first when v > 1), "send-act 3", "recv-grad 3". */
static void event_name(const ph_trace_event *e, int v, char *buf, size_t len)
{
	static const char *const comm[] = { "recv-act", "send-act", "recv-grad", "send-grad" };
	if (e->kind <= PH_OP_W) {
		ph_action a = { e->kind, 0, (uint16_t)e->chunk, e->mb };
		ph_action_str(&a, v, buf, len);
	} else if (e->kind <= PH_OP_SEND_GRAD) {
		snprintf(buf, len, "%s %d", comm[e->kind - PH_OP_RECV_ACT], e->mb);
	} else {
		snprintf(buf, len, "op%d %d", e->kind, e->mb);
	}
}

int ph_trace_write_chrome(const char *path, const ph_trace_event *ev, int n, int ranks, int v, ph_err *err)
{
	/* through core/outputs.h: a symlink followed, a device or FIFO
	 * written through, a file replaced atomically */
	ph_outfile o;
	int rc = ph_outfile_open(&o, path, "--trace", err);
	if (rc)
		return rc;
	int fd = dup(o.fd);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		rc = ph_fail(err, PH_EIO, "cannot write the trace %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		ph_outfile_abort(&o);
		return rc;
	}
	fprintf(f, "{\"traceEvents\":[\n");
	fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"pipehost\"}}");
	for (int r = 0; r < ranks; r++) {
		fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
		fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
			r, r);
	}
	for (int k = 0; k < n; k++) {
		const ph_trace_event *e = &ev[k];
		char name[64];
		event_name(e, v, name, sizeof name);
		double dur = (e->t1 - e->t0) * 1e6;
		fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":%d,"
			   "\"args\":{\"chunk\":%d,\"mb\":%d,\"step\":%lld}}",
			name, e->kind <= PH_OP_W ? "compute" : "comm", e->t0 * 1e6, dur > 0 ? dur : 0.0, e->rank, e->chunk,
			e->mb, (long long)e->step);
	}
	fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");

	errno = 0;
	int bad = ferror(f) || fflush(f) != 0;
	int e = errno;
	if (fclose(f) != 0 && !bad)
		bad = 1, e = errno;
	if (bad) {
		ph_outfile_abort(&o);
		return ph_fail(err, PH_EIO, "cannot write the trace %s: %s; the previous file is unchanged", path,
			       e ? strerror(e) : "I/O error");
	}
	return ph_outfile_commit(&o, "--trace", err);
}
