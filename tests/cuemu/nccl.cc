/* SPDX-License-Identifier: MIT */
/*
 * nccl.cc (cuemu): a CPU stand-in for NCCL (the subset in include/nccl.h),
 * between processes of one machine as under mpirun, each with its own
 * libcuemu.  It is not NVIDIA's library.
 *
 * Communicators: ncclGetUniqueId makes a fresh directory (under $TMPDIR,
 * else /tmp) and the id names it; ncclCommInitRank binds a unix-domain
 * socket there for the member and joins the others in a full mesh of
 * stream sockets (member j connects to every i < j and says who it is),
 * blocking until all have joined, or failing with ncclSystemError after
 * PH_CUEMU_NCCL_TIMEOUT seconds (default 120).  Once joined the members
 * remove their sockets and the last one the directory.  Two members on one
 * GPU (cudaGetDevice at the join) are refused as NCCL refuses them.
 *
 * Operations are stream-ordered: queued on the stream like a kernel, after
 * the work queued there before, and run in the order they were issued on
 * each communicator (as NCCL's kernels).  A peer process waits on them
 * though nothing here may, so the stream runs up to them even when lazy
 * (cuemu::enqueue_eager).  Every message between two members carries a
 * header (what it is part of, its bytes, its type, its place in the
 * direction's order); a receive that does not match the header aborts the
 * process with one line on stderr, where NCCL would hang or corrupt, and
 * so does a peer that vanished.  A send ends only once its receive has
 * taken it (a word comes back), as NCCL's of more than its buffers hold,
 * so it stays queued on its stream until then: cudaFree meanwhile aborts
 * (cuemu.cc refuse_device_wait).  A group's sends and receives are one
 * operation of its stream whose transfers progress together (nonblocking
 * sockets and poll), so a group that sends and receives megabytes both
 * ways cannot deadlock on socket buffers.  Sends to oneself are copies,
 * matched in order with the receives from oneself.
 *
 * AllReduce sends every member's buffer to every other and adds the
 * contributions in member order 0..n-1, so every member gets the same
 * bits; half and bf16 are reduced in float and rounded after each step.
 * AllGather and Broadcast move the bytes.  Collectives inside a group are
 * refused (ncclInvalidUsage): pipehost makes none.  Errors the calls can
 * see return NCCL's codes with a reason for ncclGetLastError (printed too
 * under NCCL_DEBUG=WARN or INFO).
 */
#include <nccl.h>

#include <cuda_runtime.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "cuemu-internal.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum : uint32_t {
	MAGIC_COMM = 0x6e63436du,  /* "ncCm" */
	MAGIC_DEAD = 0xdeaddeadu,
	MAGIC_HELLO = 0x6e634869u, /* "ncHi" */
	MAGIC_MSG = 0x6e634d73u,   /* "ncMs" */
};

/* The first bytes of an id this library made; the directory's path follows. */
const char ID_MAGIC[] = "cuemu-nccl";

/* What a message is part of: a receive checks that the sender's is its own. */
enum kind : uint32_t { K_P2P = 1, K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_P2P_DONE };

const char *kind_name(uint32_t k)
{
	switch (k) {
	case K_P2P: return "ncclSend";
	case K_ALLREDUCE: return "ncclAllReduce";
	case K_ALLGATHER: return "ncclAllGather";
	case K_BROADCAST: return "ncclBroadcast";
	case K_P2P_DONE: return "ncclRecv's answer";
	default: return "unknown operation";
	}
}

/* What members say when they connect. */
struct hello {
	uint32_t magic;
	int32_t members, member, device, pid;
};

/* Before every message's bytes. */
struct header {
	uint32_t magic, kind;
	uint32_t type; /* ncclDataType_t */
	uint32_t arg;  /* AllReduce: the ncclRedOp_t; Broadcast: the root */
	uint64_t bytes;
	uint64_t seq; /* 1, 2, ...: the message's place in its direction */
};

} // namespace

struct ncclComm {
	uint32_t magic;
	int n, rank, device;
	std::string where;            /* the rendezvous directory, for messages */
	std::vector<int> fd;          /* [member]: the socket to it (-1: itself) */
	std::vector<int> pid;         /* [member]: its process, for messages */
	std::vector<int> dev;         /* [member]: its GPU at the join */
	std::vector<uint64_t> sent;   /* [member]: messages sent to it so far */
	std::vector<uint64_t> got;    /* [member]: ... received from it */
	std::deque<std::vector<char>> to_self; /* sent to itself, not yet received */
	/* Operations run in the order they were issued, each after the one
	 * before has finished, whatever streams they are on (as NCCL's kernels
	 * on one communicator); the two counters are tickets. */
	std::mutex m;
	std::condition_variable cv;
	uint64_t issued = 0, finished = 0;
	bool aborted = false;
	std::string error; /* the last error of a call on it */
};

namespace {

/* ---------------------------------------------------------------- */
/* Errors                                                             */

thread_local std::string last_error;

/* Records why a call failed (ncclGetLastError) and returns r. */
ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t fail(ncclComm *c, ncclResult_t r, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	last_error = msg;
	if (c) {
		std::lock_guard<std::mutex> lk(c->m);
		c->error = msg;
	}
	const char *d = getenv("NCCL_DEBUG");
	if (d && (!strcasecmp(d, "WARN") || !strcasecmp(d, "INFO") || !strcasecmp(d, "TRACE")))
		fprintf(stderr, "cuemu: NCCL WARN %s\n", msg);
	return r;
}

/* What NCCL would hang on or corrupt: one line on stderr, and abort. */
[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "cuemu: NCCL: %s\n", msg);
	fflush(stderr);
	abort();
}

/* ---------------------------------------------------------------- */
/* Arguments                                                          */

size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8: return 1;
	case ncclFloat16:
	case ncclBfloat16: return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32: return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64: return 8;
	default: return 0;
	}
}

const char *type_name(uint32_t t)
{
	static const char *names[] = { "ncclInt8",    "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
				       "ncclUint64",  "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16" };
	return t < sizeof names / sizeof *names ? names[t] : "an unknown type";
}

const char *op_name(uint32_t op)
{
	static const char *names[] = { "ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg" };
	return op < sizeof names / sizeof *names ? names[op] : "an unknown operation";
}

bool comm_ok(ncclComm_t c)
{
	return c && c->magic == MAGIC_COMM;
}

/* The checks every operation makes; ncclSuccess or the reason. */
ncclResult_t check_op(const char *fn, ncclComm_t c, const void *buf, size_t count, ncclDataType_t t)
{
	if (!comm_ok(c))
		return fail(NULL, ncclInvalidArgument, "%s: the communicator is NULL, destroyed or not one", fn);
	if (!type_size(t))
		return fail(c, ncclInvalidArgument, "%s: datatype %d is not one of NCCL's", fn, (int)t);
	if (count && !buf)
		return fail(c, ncclInvalidArgument, "%s: a NULL buffer for %zu elements", fn, count);
	if (count > (size_t)1 << 40)
		return fail(c, ncclInvalidArgument, "%s: %zu elements", fn, count);
	return ncclSuccess;
}

double timeout_s(void)
{
	const char *e = getenv("PH_CUEMU_NCCL_TIMEOUT");
	double t = e ? atof(e) : 0;
	return t > 0 ? t : 120;
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- */
/* Joining: the mesh of sockets                                       */

std::string member_path(const std::string &dir, int m)
{
	return dir + "/m" + std::to_string(m);
}

bool set_address(sockaddr_un *a, const std::string &path)
{
	memset(a, 0, sizeof *a);
	a->sun_family = AF_UNIX;
	if (path.size() >= sizeof a->sun_path)
		return false;
	memcpy(a->sun_path, path.c_str(), path.size() + 1);
	return true;
}

/* Moves len bytes over blocking socket fd before `deadline`; 0, or -1 with
 * errno (ETIMEDOUT; EPIPE when the peer closed). */
int io_until(int fd, void *buf, size_t len, bool out, double deadline)
{
	char *p = (char *)buf;
	while (len) {
		double left = deadline - now_s();
		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		struct pollfd pf = { fd, (short)(out ? POLLOUT : POLLIN), 0 };
		int r = poll(&pf, 1, (int)(left * 1000) + 1);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r <= 0)
			continue;
		ssize_t k = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (k == 0) {
			errno = EPIPE;
			return -1;
		}
		if (k < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -1;
		}
		p += k;
		len -= (size_t)k;
	}
	return 0;
}

hello my_hello(const ncclComm *c)
{
	hello h = { MAGIC_HELLO, c->n, c->rank, c->device, (int32_t)getpid() };
	return h;
}

/* A peer's hello: it must be of this communicator, and the member we expect
 * (want >= 0) or one we have not heard from (want < 0). */
ncclResult_t check_hello(ncclComm *c, const hello &h, int want)
{
	if (h.magic != MAGIC_HELLO)
		return fail(c, ncclSystemError, "ncclCommInitRank: a stranger connected at %s", c->where.c_str());
	if (h.members != c->n)
		return fail(c, ncclInvalidUsage,
			    "ncclCommInitRank: member %d joined %s as one of %d members, member %d as one of %d",
			    (int)h.member, c->where.c_str(), (int)h.members, c->rank, c->n);
	if ((want >= 0 && h.member != want) || (want < 0 && (h.member <= c->rank || h.member >= c->n)) ||
	    (want < 0 && c->fd[h.member] >= 0))
		return fail(c, ncclInvalidUsage, "ncclCommInitRank: member %d joined %s twice, or out of turn",
			    (int)h.member, c->where.c_str());
	return ncclSuccess;
}

/* Member j connects to every i < j and says who it is. */
ncclResult_t connect_down(ncclComm *c, double deadline)
{
	hello mine = my_hello(c);
	for (int i = 0; i < c->rank; i++) {
		sockaddr_un a;
		set_address(&a, member_path(c->where, i));
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return fail(c, ncclSystemError, "ncclCommInitRank: socket: %s", strerror(errno));
		c->fd[i] = fd;
		/* not there yet (ENOENT), bound but not listening (ECONNREFUSED),
		 * or its backlog full (EAGAIN): try again, backing off */
		for (int nap = 1000; connect(fd, (sockaddr *)&a, sizeof a) < 0; nap = std::min(2 * nap, 50000)) {
			if (errno != ENOENT && errno != ECONNREFUSED && errno != EAGAIN && errno != EINTR)
				return fail(c, ncclSystemError, "ncclCommInitRank: member %d cannot reach member %d at %s: %s",
					    c->rank, i, a.sun_path, strerror(errno));
			if (now_s() > deadline)
				return fail(c, ncclSystemError,
					    "ncclCommInitRank: member %d of %d waited %.0f s for member %d to join %s "
					    "(it never called ncclCommInitRank with this id, or called it on another machine)",
					    c->rank, c->n, timeout_s(), i, c->where.c_str());
			usleep((useconds_t)nap);
		}
		if (io_until(fd, &mine, sizeof mine, true, deadline))
			return fail(c, ncclSystemError, "ncclCommInitRank: member %d cannot greet member %d at %s: %s",
				    c->rank, i, c->where.c_str(), strerror(errno));
	}
	return ncclSuccess;
}

/* Member i accepts every j > i, hears who it is and answers. */
ncclResult_t accept_up(ncclComm *c, int lfd, double deadline)
{
	hello mine = my_hello(c);
	for (int k = c->rank + 1; k < c->n; k++) {
		int fd = -1;
		while (fd < 0) {
			double left = deadline - now_s();
			struct pollfd pf = { lfd, POLLIN, 0 };
			int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
			if (r < 0 && errno != EINTR)
				return fail(c, ncclSystemError, "ncclCommInitRank: poll: %s", strerror(errno));
			if (r == 0 && now_s() > deadline) {
				std::string missing;
				for (int j = c->rank + 1; j < c->n; j++)
					if (c->fd[j] < 0)
						missing += (missing.empty() ? "" : ", ") + std::to_string(j);
				return fail(c, ncclSystemError,
					    "ncclCommInitRank: member %d of %d waited %.0f s for member(s) %s to join %s "
					    "(they never called ncclCommInitRank with this id)",
					    c->rank, c->n, timeout_s(), missing.c_str(), c->where.c_str());
			}
			if (r > 0)
				fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd < 0 && r > 0 && errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
				return fail(c, ncclSystemError, "ncclCommInitRank: accept: %s", strerror(errno));
		}
		hello h;
		if (io_until(fd, &h, sizeof h, false, deadline)) {
			close(fd);
			return fail(c, ncclSystemError, "ncclCommInitRank: member %d of %s: a member connected and said nothing: %s",
				    c->rank, c->where.c_str(), strerror(errno));
		}
		ncclResult_t r = check_hello(c, h, -1);
		if (r) {
			close(fd);
			return r;
		}
		c->fd[h.member] = fd;
		c->pid[h.member] = h.pid;
		c->dev[h.member] = h.device;
		if (io_until(fd, &mine, sizeof mine, true, deadline))
			return fail(c, ncclSystemError, "ncclCommInitRank: member %d cannot answer member %d at %s: %s",
				    c->rank, (int)h.member, c->where.c_str(), strerror(errno));
	}
	return ncclSuccess;
}

/* ... and member j hears the answers of every i < j. */
ncclResult_t hear_down(ncclComm *c, double deadline)
{
	for (int i = 0; i < c->rank; i++) {
		hello h;
		if (io_until(c->fd[i], &h, sizeof h, false, deadline))
			return fail(c, ncclSystemError,
				    "ncclCommInitRank: member %d of %d waited %.0f s for member %d's answer at %s: %s",
				    c->rank, c->n, timeout_s(), i, c->where.c_str(), strerror(errno));
		ncclResult_t r = check_hello(c, h, i);
		if (r)
			return r;
		c->pid[i] = h.pid;
		c->dev[i] = h.device;
	}
	return ncclSuccess;
}

/* NCCL refuses two members on one GPU; every member sees the same pair. */
ncclResult_t check_devices(ncclComm *c)
{
	for (int j = 1; j < c->n; j++)
		for (int i = 0; i < j; i++)
			if (c->dev[i] == c->dev[j])
				return fail(c, ncclInvalidUsage,
					    "Duplicate GPU detected: members %d and %d of %s are both on cuda:%d (NCCL refuses "
					    "two members on one GPU)",
					    i, j, c->where.c_str(), c->dev[i]);
	return ncclSuccess;
}

/* Binds the member's socket, joins the mesh, then removes the socket, and
 * the directory when it is the last member out (rmdir fails while another
 * member's socket is there).  No member can leave before every member has
 * bound its socket: the last to join connects to all below it. */
ncclResult_t join(ncclComm *c)
{
	double deadline = now_s() + timeout_s();
	std::string path = member_path(c->where, c->rank);
	sockaddr_un a;
	if (!set_address(&a, path))
		return fail(c, ncclInvalidArgument, "ncclCommInitRank: the id's path %s is too long", path.c_str());
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return fail(c, ncclSystemError, "ncclCommInitRank: socket: %s", strerror(errno));
	ncclResult_t r = ncclSuccess;
	if (bind(lfd, (sockaddr *)&a, sizeof a) < 0) {
		int e = errno;
		close(lfd);
		if (e == EADDRINUSE)
			return fail(c, ncclInvalidUsage, "ncclCommInitRank: member %d joined %s twice", c->rank,
				    c->where.c_str());
		if (e == ENOENT)
			return fail(c, ncclSystemError,
				    "ncclCommInitRank: no rendezvous directory %s: ncclGetUniqueId makes one per communicator "
				    "and its members remove it once all have joined (an id used twice?)",
				    c->where.c_str());
		return fail(c, ncclSystemError, "ncclCommInitRank: cannot bind %s: %s", path.c_str(), strerror(e));
	}
	if (listen(lfd, c->n) < 0)
		r = fail(c, ncclSystemError, "ncclCommInitRank: listen on %s: %s", path.c_str(), strerror(errno));
	if (!r)
		r = connect_down(c, deadline);
	if (!r)
		r = accept_up(c, lfd, deadline);
	if (!r)
		r = hear_down(c, deadline);
	if (!r)
		r = check_devices(c);
	close(lfd);
	unlink(path.c_str());
	rmdir(c->where.c_str());
	for (int i = 0; !r && i < c->n; i++)
		if (c->fd[i] >= 0)
			fcntl(c->fd[i], F_SETFL, fcntl(c->fd[i], F_GETFL) | O_NONBLOCK);
	return r;
}

void close_all(ncclComm *c)
{
	for (int &fd : c->fd)
		if (fd >= 0) {
			close(fd);
			fd = -1;
		}
}

/* ---------------------------------------------------------------- */
/* Transfers                                                          */

/* One message to or from a member, moved by progress(). */
struct xfer {
	ncclComm *c;
	int peer;
	bool out;
	header h;      /* out: what goes first; in: what the sender must have said */
	header seen;   /* in: what it did say */
	char *buf;     /* out: the bytes; in: where they land */
	size_t moved;  /* of the header and bytes */
	const char *hint; /* in: why a wrong size happens, for the message */
};

xfer make_out(ncclComm *c, int peer, uint32_t k, uint32_t type, uint32_t arg, const void *buf, size_t bytes)
{
	xfer x = {};
	x.c = c;
	x.peer = peer;
	x.out = true;
	x.h = { MAGIC_MSG, k, type, arg, bytes, ++c->sent[peer] };
	x.buf = (char *)buf;
	return x;
}

xfer make_in(ncclComm *c, int peer, uint32_t k, uint32_t type, uint32_t arg, void *buf, size_t bytes, const char *hint)
{
	xfer x = {};
	x.c = c;
	x.peer = peer;
	x.out = false;
	x.h = { MAGIC_MSG, k, type, arg, bytes, ++c->got[peer] };
	x.buf = (char *)buf;
	x.hint = hint;
	return x;
}

[[noreturn]] void gone(const xfer &x, int e)
{
	if (x.h.kind == K_P2P_DONE)
		die("member %d (pid %d) of the communicator at %s is gone (it exited or aborted%s%s) while member %d "
		    "waited for it to take a send",
		    x.peer, x.c->pid[x.peer], x.c->where.c_str(), e ? ": " : "", e ? strerror(e) : "", x.c->rank);
	die("member %d (pid %d) of the communicator at %s is gone (it exited or aborted%s%s) while member %d %s %llu "
	    "bytes %s it",
	    x.peer, x.c->pid[x.peer], x.c->where.c_str(), e ? ": " : "", e ? strerror(e) : "", x.c->rank,
	    x.out ? "sent" : "waited for", (unsigned long long)x.h.bytes, x.out ? "to" : "from");
}

/* The header of a message received: is it the one this side waits for? */
void check_header(const xfer &x)
{
	const header &s = x.seen, &w = x.h;
	int from = x.peer, me = x.c->rank;
	if (s.magic != MAGIC_MSG || s.seq != w.seq)
		die("member %d received garbage from member %d (message %llu of that direction, header %08x): "
		    "an emulator bug",
		    me, from, (unsigned long long)w.seq, s.magic);
	if (s.kind != w.kind)
		die("member %d sent %llu bytes of an %s, member %d waits for an %s's (the members call NCCL's operations "
		    "in different orders)",
		    from, (unsigned long long)s.bytes, kind_name(s.kind), me, kind_name(w.kind));
	if (s.bytes != w.bytes)
		die("member %d sent %llu bytes, member %d expected %llu (%s)", from, (unsigned long long)s.bytes, me,
		    (unsigned long long)w.bytes, x.hint);
	if (w.kind == K_ALLREDUCE && (s.type != w.type || s.arg != w.arg))
		die("member %d reduces %s with %s, member %d %s with %s", from, type_name(s.type), op_name(s.arg), me,
		    type_name(w.type), op_name(w.arg));
	if (w.kind == K_BROADCAST && s.arg != w.arg)
		die("member %d broadcasts from root %u, member %d from root %u", from, s.arg, me, w.arg);
}

/* Moves what it can of x over its nonblocking socket; true once done.  A
 * send gives the header and the bytes in one call: a message the socket
 * has room for is there whole, even if the peer aborts on its header. */
bool step(xfer &x)
{
	int fd = x.c->fd[x.peer];
	size_t total = sizeof(header) + x.h.bytes;
	while (x.moved < total) {
		bool head = x.moved < sizeof(header);
		char *p = head ? (char *)(x.out ? &x.h : &x.seen) + x.moved : x.buf + (x.moved - sizeof(header));
		size_t len = head ? sizeof(header) - x.moved : total - x.moved;
		ssize_t k;
		if (x.out) {
			struct iovec v[2] = { { p, len }, { x.buf, x.h.bytes } };
			struct msghdr mh = {};
			mh.msg_iov = v;
			mh.msg_iovlen = head && x.h.bytes ? 2 : 1;
			k = sendmsg(fd, &mh, MSG_NOSIGNAL);
		} else {
			k = recv(fd, p, len, 0);
		}
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return false;
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			gone(x, k < 0 ? errno : 0);
		x.moved += (size_t)k;
		if (!x.out && head && x.moved == sizeof(header))
			check_header(x);
	}
	return true;
}

/* Moves every transfer of xs, all at once: the messages of one direction
 * of one pair in order, the directions and pairs concurrently. */
void progress(std::vector<xfer> &xs)
{
	struct lane {
		int fd;
		std::deque<xfer *> out, in;
	};
	std::vector<lane> lanes;
	for (xfer &x : xs) {
		int fd = x.c->fd[x.peer];
		auto l = std::find_if(lanes.begin(), lanes.end(), [fd](const lane &y) { return y.fd == fd; });
		if (l == lanes.end())
			l = lanes.insert(lanes.end(), lane{ fd, {}, {} });
		(x.out ? l->out : l->in).push_back(&x);
	}
	size_t left = xs.size();
	double warn_at = now_s() + timeout_s();
	std::vector<pollfd> pf;
	while (left) {
		pf.clear();
		for (const lane &l : lanes) {
			short ev = (short)((l.out.empty() ? 0 : POLLOUT) | (l.in.empty() ? 0 : POLLIN));
			if (ev)
				pf.push_back({ l.fd, ev, 0 });
		}
		double wait = warn_at - now_s();
		int r = poll(pf.data(), pf.size(), warn_at < 0 ? -1 : wait > 0 ? (int)(wait * 1000) + 1 : 0);
		if (r < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (r == 0 && warn_at > 0 && now_s() >= warn_at) {
			/* NCCL would wait for ever too; say so once */
			const xfer *x = xs.data();
			fprintf(stderr, "cuemu: NCCL: member %d has waited %.0f s for its peers at %s (still waiting)\n",
				x->c->rank, timeout_s(), x->c->where.c_str());
			warn_at = -1;
		}
		for (size_t i = 0; r > 0 && i < pf.size(); i++) {
			if (!pf[i].revents)
				continue;
			lane &l = *std::find_if(lanes.begin(), lanes.end(), [&](const lane &y) { return y.fd == pf[i].fd; });
			while (!l.in.empty() && (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) && step(*l.in.front())) {
				l.in.pop_front();
				left--;
			}
			while (!l.out.empty() && (pf[i].revents & (POLLOUT | POLLHUP | POLLERR)) && step(*l.out.front())) {
				l.out.pop_front();
				left--;
			}
		}
	}
}

/* ---------------------------------------------------------------- */
/* Operations on streams                                              */

/* Serialises taking tickets and queueing, so that the order of two
 * operations on a stream is the order of their tickets. */
std::mutex issue_m;

bool take_turn(ncclComm *c, uint64_t ticket)
{
	std::unique_lock<std::mutex> lk(c->m);
	c->cv.wait(lk, [c, ticket] { return c->finished == ticket; });
	return !c->aborted;
}

void end_turn(ncclComm *c)
{
	std::lock_guard<std::mutex> lk(c->m);
	c->finished++;
	c->cv.notify_all();
}

/* Runs body on stream s after the work queued there before, and on each
 * communicator of cs after the operations issued on it before. */
void issue(std::vector<ncclComm *> cs, cudaStream_t s, std::function<void()> body)
{
	std::sort(cs.begin(), cs.end());
	cs.erase(std::unique(cs.begin(), cs.end()), cs.end());
	auto tickets = std::make_shared<std::vector<uint64_t>>();
	auto run = [cs, tickets, body] {
		bool live = true;
		for (size_t i = 0; i < cs.size(); i++) /* in address order: no two operations wait on each other */
			live &= take_turn(cs[i], (*tickets)[i]);
		if (live)
			body();
		for (ncclComm *c : cs)
			end_turn(c);
		cuemu::nccl_queued_add(-1);
	};
	cuemu::nccl_queued_add(1);
	std::unique_lock<std::mutex> lk(issue_m);
	for (ncclComm *c : cs) {
		std::lock_guard<std::mutex> ck(c->m);
		tickets->push_back(c->issued++);
	}
	if (cuemu::runs_at_once(s)) {
		/* on this thread: the lock must not be held while it waits for peers */
		lk.unlock();
		run();
	} else {
		cuemu::enqueue_eager(s, run);
	}
}

/* A send or a receive of a group, or alone. */
struct p2p {
	ncclComm *c;
	bool out;
	int peer;
	char *buf;
	size_t bytes;
	uint32_t type;
};

const char *const P2P_HINT = "the two issue their sends and receives in different orders";

/* The sends and receives of a group: those to itself are copies, made
 * before the others move (a send's bytes as they were when the group ran)
 * and landed after. */
void run_p2p(const std::vector<p2p> &ops)
{
	std::vector<xfer> xs;
	for (const p2p &o : ops)
		if (o.out && o.peer == o.c->rank)
			o.c->to_self.emplace_back(o.buf, o.buf + o.bytes);
	for (const p2p &o : ops)
		if (o.peer != o.c->rank)
			xs.push_back(o.out ? make_out(o.c, o.peer, K_P2P, o.type, 0, o.buf, o.bytes)
					   : make_in(o.c, o.peer, K_P2P, o.type, 0, o.buf, o.bytes, P2P_HINT));
	progress(xs);
	/* A send of more than NCCL's buffers hold ends only once the receive has
	 * taken it, so each send here waits for a word back from its receive:
	 * the send stays queued on its stream until the peer's receive has run,
	 * as on a GPU, where a cudaFree meanwhile would wait for the peer
	 * (refuse_device_wait in cuemu.cc sees it). */
	std::vector<xfer> answers;
	for (const p2p &o : ops)
		if (o.peer != o.c->rank)
			answers.push_back(o.out ? make_in(o.c, o.peer, K_P2P_DONE, 0, 0, NULL, 0, P2P_HINT)
						: make_out(o.c, o.peer, K_P2P_DONE, 0, 0, NULL, 0));
	progress(answers);
	for (const p2p &o : ops) {
		if (o.out || o.peer != o.c->rank)
			continue;
		if (o.c->to_self.empty())
			die("member %d receives %zu bytes from itself, and sent itself none before (NCCL would hang)",
			    o.c->rank, o.bytes);
		std::vector<char> &m = o.c->to_self.front();
		if (m.size() != o.bytes)
			die("member %d sent %zu bytes, member %d expected %zu (%s)", o.c->rank, m.size(), o.c->rank, o.bytes,
			    P2P_HINT);
		memcpy(o.buf, m.data(), m.size());
		o.c->to_self.pop_front();
	}
}

/* Groups: thread-local and nested, as NCCL's. */
thread_local int group_depth;
thread_local std::vector<p2p> group_ops;
thread_local cudaStream_t group_stream;
thread_local ncclResult_t group_error;

/* An error inside a group also fails its ncclGroupEnd, which then runs
 * nothing (as NCCL). */
ncclResult_t in_group(ncclResult_t r)
{
	if (r && group_depth && !group_error)
		group_error = r;
	return r;
}

ncclResult_t point_to_point(const char *fn, bool out, const void *buf, size_t count, ncclDataType_t t, int peer,
			    ncclComm_t c, cudaStream_t s)
{
	ncclResult_t r = check_op(fn, c, buf, count, t);
	if (r)
		return in_group(r);
	if (peer < 0 || peer >= c->n)
		return in_group(fail(c, ncclInvalidArgument, "%s: peer %d of a communicator of %d members", fn, peer, c->n));
	if (!count)
		return ncclSuccess;
	p2p o = { c, out, peer, (char *)buf, count * type_size(t), (uint32_t)t };
	if (!group_depth) {
		issue({ c }, s, [o] { run_p2p({ o }); });
		return ncclSuccess;
	}
	if (!group_ops.empty() && s != group_stream)
		return in_group(fail(c, ncclInvalidUsage,
				     "%s to or from member %d: the group's operations before it are on another stream "
				     "(the emulator runs a group as one operation of one stream)",
				     fn, peer));
	group_stream = s;
	group_ops.push_back(o);
	return ncclSuccess;
}

/* ---------------------------------------------------------------- */
/* Reductions                                                         */

float half_to_float(uint16_t h)
{
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
	float f;
	if (e == 31) {
		uint32_t u = (uint32_t)(h & 0x8000) << 16 | 0x7f800000u | m << 13;
		memcpy(&f, &u, 4);
		return f;
	}
	f = e ? ldexpf((float)(m | 0x400), (int)e - 25) : ldexpf((float)m, -24);
	return h & 0x8000 ? -f : f;
}

/* Rounded to nearest even, as __float2half_rn. */
uint16_t float_to_half(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u)
		return sign | 0x7e00; /* nan, quiet */
	if (u >= 0x477ff000u)         /* 65520 and up round to inf */
		return sign | 0x7c00;
	if (u < 0x38800000u) { /* below 2^-14: a subnormal, in units of 2^-24 */
		float a;
		memcpy(&a, &u, 4);
		return sign | (uint16_t)nearbyintf(a * 16777216.0f);
	}
	uint32_t h = ((u >> 23) - 112) << 10 | (u & 0x7fffff) >> 13, rest = u & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;
	return sign | (uint16_t)h;
}

template <typename T> T combine(T a, T b, int op)
{
	switch (op) {
	case ncclProd: return a * b;
	case ncclMax: return a > b ? a : b;
	case ncclMin: return a < b ? a : b;
	default: return a + b; /* ncclSum, ncclAvg */
	}
}

/* Integers wrap as on the GPU: the arithmetic in the unsigned type. */
template <typename T> T combine_int(T a, T b, int op)
{
	typedef typename std::make_unsigned<T>::type U;
	if (op == ncclSum || op == ncclAvg)
		return (T)((U)a + (U)b);
	if (op == ncclProd)
		return (T)((U)a * (U)b);
	return combine(a, b, op);
}

/* out[i] = in[0][i] op in[1][i] op ... in member order; ncclAvg: floats
 * each times 1/n first, integers summed then divided (as NCCL's). */
template <typename T> void reduce_ints(const std::vector<const char *> &in, char *out, size_t count, int op)
{
	for (size_t i = 0; i < count; i++) {
		T acc;
		memcpy(&acc, in[0] + i * sizeof(T), sizeof(T));
		for (size_t p = 1; p < in.size(); p++) {
			T v;
			memcpy(&v, in[p] + i * sizeof(T), sizeof(T));
			acc = combine_int(acc, v, op);
		}
		if (op == ncclAvg)
			acc = (T)(acc / (T)in.size());
		memcpy(out + i * sizeof(T), &acc, sizeof(T));
	}
}

template <typename T> void reduce_floats(const std::vector<const char *> &in, char *out, size_t count, int op)
{
	T scale = (T)1 / (T)in.size();
	for (size_t i = 0; i < count; i++) {
		T acc;
		memcpy(&acc, in[0] + i * sizeof(T), sizeof(T));
		if (op == ncclAvg)
			acc *= scale;
		for (size_t p = 1; p < in.size(); p++) {
			T v;
			memcpy(&v, in[p] + i * sizeof(T), sizeof(T));
			acc = combine(acc, op == ncclAvg ? v * scale : v, op);
		}
		memcpy(out + i * sizeof(T), &acc, sizeof(T));
	}
}

/* half and bf16: each step in float, rounded back to the type */
template <float (*load)(uint16_t), uint16_t (*store)(float)>
void reduce_16(const std::vector<const char *> &in, char *out, size_t count, int op)
{
	auto at = [](const char *p, size_t i) {
		uint16_t u;
		memcpy(&u, p + 2 * i, 2);
		return load(u);
	};
	float scale = 1.0f / (float)in.size();
	for (size_t i = 0; i < count; i++) {
		float acc = at(in[0], i);
		if (op == ncclAvg)
			acc = load(store(acc * scale));
		for (size_t p = 1; p < in.size(); p++) {
			float v = at(in[p], i);
			if (op == ncclAvg)
				v = load(store(v * scale));
			acc = load(store(combine(acc, v, op)));
		}
		uint16_t u = store(acc);
		memcpy(out + 2 * i, &u, 2);
	}
}

float bf16_to_float(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

uint16_t float_to_bf16(float f)
{
	f = cuemu::round_bf16(f);
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

void reduce(const std::vector<const char *> &in, char *out, size_t count, ncclDataType_t t, int op)
{
	switch (t) {
	case ncclInt8: reduce_ints<int8_t>(in, out, count, op); break;
	case ncclUint8: reduce_ints<uint8_t>(in, out, count, op); break;
	case ncclInt32: reduce_ints<int32_t>(in, out, count, op); break;
	case ncclUint32: reduce_ints<uint32_t>(in, out, count, op); break;
	case ncclInt64: reduce_ints<int64_t>(in, out, count, op); break;
	case ncclUint64: reduce_ints<uint64_t>(in, out, count, op); break;
	case ncclFloat16: reduce_16<half_to_float, float_to_half>(in, out, count, op); break;
	case ncclFloat32: reduce_floats<float>(in, out, count, op); break;
	case ncclFloat64: reduce_floats<double>(in, out, count, op); break;
	case ncclBfloat16: reduce_16<bf16_to_float, float_to_bf16>(in, out, count, op); break;
	default: break;
	}
}

/* Every member's buffer to every other at once, then the sum (or other
 * operation) in member order; in place (send == recv) works, as each
 * element is read before it is written. */
void run_all_reduce(ncclComm *c, const char *send, char *recv, size_t count, ncclDataType_t t, ncclRedOp_t op)
{
	size_t bytes = count * type_size(t);
	std::vector<std::vector<char>> theirs(c->n);
	std::vector<xfer> xs;
	std::vector<const char *> in(c->n);
	for (int p = 0; p < c->n; p++) {
		if (p == c->rank) {
			in[p] = send;
			continue;
		}
		theirs[p].resize(bytes);
		in[p] = theirs[p].data();
		xs.push_back(make_out(c, p, K_ALLREDUCE, t, op, send, bytes));
		xs.push_back(make_in(c, p, K_ALLREDUCE, t, op, theirs[p].data(), bytes,
				     "the members call ncclAllReduce with different counts"));
	}
	progress(xs);
	reduce(in, recv, count, t, op);
}

/* recv[p] = member p's send, in member order; in place (send == recv +
 * rank * bytes) works. */
void run_all_gather(ncclComm *c, const char *send, char *recv, size_t bytes, ncclDataType_t t)
{
	std::vector<xfer> xs;
	for (int p = 0; p < c->n; p++) {
		if (p == c->rank)
			continue;
		xs.push_back(make_out(c, p, K_ALLGATHER, t, 0, send, bytes));
		xs.push_back(make_in(c, p, K_ALLGATHER, t, 0, recv + (size_t)p * bytes, bytes,
				     "the members call ncclAllGather with different counts"));
	}
	progress(xs);
	if (send != recv + (size_t)c->rank * bytes)
		memmove(recv + (size_t)c->rank * bytes, send, bytes);
}

void run_broadcast(ncclComm *c, const char *send, char *recv, size_t bytes, ncclDataType_t t, int root)
{
	std::vector<xfer> xs;
	for (int p = 0; c->rank == root && p < c->n; p++)
		if (p != root)
			xs.push_back(make_out(c, p, K_BROADCAST, t, (uint32_t)root, send, bytes));
	if (c->rank != root)
		xs.push_back(make_in(c, root, K_BROADCAST, t, (uint32_t)root, recv, bytes,
				     "the members call ncclBroadcast with different counts"));
	progress(xs);
	if (c->rank == root && send != recv)
		memmove(recv, send, bytes);
}

/* A collective's checks: inside a group it is refused, as the emulator
 * runs a group's sends and receives only. */
ncclResult_t check_collective(const char *fn, ncclComm_t c, const void *send, void *recv, size_t count,
			      ncclDataType_t t)
{
	ncclResult_t r = check_op(fn, c, recv, count, t);
	if (!r && count && !send)
		r = fail(c, ncclInvalidArgument, "%s: a NULL send buffer for %zu elements", fn, count);
	if (!r && group_depth)
		r = fail(c, ncclInvalidUsage, "%s inside ncclGroupStart/ncclGroupEnd: not emulated", fn);
	return in_group(r);
}

} // namespace

/* ---------------------------------------------------------------- */
/* The API                                                            */

EXPORT ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r)
{
	switch (r) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

/* The calling thread's last error, else the communicator's (NCCL keeps one
 * for the process; a thread's is what a caller with several threads means). */
EXPORT const char *ncclGetLastError(ncclComm_t c)
{
	static thread_local std::string copy;
	if (!last_error.empty() || !comm_ok(c))
		return last_error.c_str();
	std::lock_guard<std::mutex> lk(c->m);
	copy = c->error;
	return copy.c_str();
}

/* Errors of the operations abort the process (see the top), so none is
 * ever pending. */
EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e)
{
	if (!comm_ok(c) || !e)
		return fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: a NULL argument or not a communicator");
	*e = ncclSuccess;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static std::atomic<unsigned> made{ 0 };
	if (!id)
		return fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
	/* a socket's path holds 107 bytes: a long TMPDIR gives way to /tmp */
	const char *t = getenv("TMPDIR");
	std::string base = t && *t && strlen(t) < 60 ? t : "/tmp";
	for (int tries = 0; tries < 1000; tries++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		char dir[sizeof id->internal - sizeof ID_MAGIC];
		snprintf(dir, sizeof dir, "%s/cuemu-nccl-%d-%u-%lld", base.c_str(), (int)getpid(), made++,
			 (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
		if (!mkdir(dir, 0700)) {
			memset(id, 0, sizeof *id);
			memcpy(id->internal, ID_MAGIC, sizeof ID_MAGIC);
			memcpy(id->internal + sizeof ID_MAGIC, dir, strlen(dir) + 1);
			return ncclSuccess;
		}
		if (errno != EEXIST)
			return fail(NULL, ncclSystemError, "ncclGetUniqueId: cannot make the rendezvous directory %s: %s",
				    dir, strerror(errno));
	}
	return fail(NULL, ncclSystemError, "ncclGetUniqueId: no fresh directory under %s", base.c_str());
}

/* Closes c's sockets and frees it; a later call with it fails comm_ok. */
static void comm_free(ncclComm_t c)
{
	close_all(c);
	c->magic = MAGIC_DEAD;
	delete c;
}

/* The start of ncclCommDestroy and ncclCommAbort (fn): NULL is nothing to
 * end (*rc ncclSuccess), a pointer that is no live communicator an error.
 * True when the caller goes on to end c. */
static bool comm_ending(ncclComm_t c, const char *fn, ncclResult_t *rc)
{
	*rc = ncclSuccess;
	if (!c)
		return false;
	if (!comm_ok(c)) {
		*rc = fail(NULL, ncclInvalidArgument, "%s: not a communicator, or ended already", fn);
		return false;
	}
	return true;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int n, ncclUniqueId id, int rank)
{
	last_error.clear();
	if (!out)
		return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
	*out = NULL;
	if (n < 1 || rank < 0 || rank >= n)
		return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: member %d of %d", rank, n);
	const char *dir = id.internal + sizeof ID_MAGIC;
	if (memcmp(id.internal, ID_MAGIC, sizeof ID_MAGIC) || dir[0] != '/' ||
	    !memchr(dir, 0, sizeof id.internal - sizeof ID_MAGIC))
		return fail(NULL, ncclInvalidArgument, "ncclCommInitRank: the id was not made by ncclGetUniqueId");
	ncclComm *c = new ncclComm();
	c->magic = MAGIC_COMM;
	c->n = n;
	c->rank = rank;
	cudaGetDevice(&c->device);
	c->where = dir;
	c->fd.assign(n, -1);
	c->pid.assign(n, (int)getpid());
	c->dev.assign(n, c->device);
	c->sent.assign(n, 0);
	c->got.assign(n, 0);
	ncclResult_t r = join(c);
	if (r) {
		comm_free(c);
		return r;
	}
	*out = c;
	return ncclSuccess;
}

/* Waits for the operations issued on c, then closes its sockets. */
EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	ncclResult_t rc;
	if (!comm_ending(c, "ncclCommDestroy", &rc))
		return rc;
	{
		std::unique_lock<std::mutex> lk(c->m);
		c->cv.wait(lk, [c] { return c->finished == c->issued; });
	}
	comm_free(c);
	return ncclSuccess;
}

/* Closes c's sockets at once: its operations not yet run do nothing, and a
 * peer waiting on it is told it is gone.  The object stays while any is
 * queued. */
EXPORT ncclResult_t ncclCommAbort(ncclComm_t c)
{
	ncclResult_t rc;
	if (!comm_ending(c, "ncclCommAbort", &rc))
		return rc;
	bool idle;
	{
		std::lock_guard<std::mutex> lk(c->m);
		c->aborted = true;
		idle = c->finished == c->issued;
		for (int fd : c->fd)
			if (fd >= 0)
				shutdown(fd, SHUT_RDWR);
	}
	if (idle)
		comm_free(c);
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
	if (!comm_ok(c) || !count)
		return fail(NULL, ncclInvalidArgument, "ncclCommCount: a NULL argument or not a communicator");
	*count = c->n;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device)
{
	if (!comm_ok(c) || !device)
		return fail(NULL, ncclInvalidArgument, "ncclCommCuDevice: a NULL argument or not a communicator");
	*device = c->device;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
	if (!comm_ok(c) || !rank)
		return fail(NULL, ncclInvalidArgument, "ncclCommUserRank: a NULL argument or not a communicator");
	*rank = c->rank;
	return ncclSuccess;
}

EXPORT ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s)
{
	return point_to_point("ncclSend", true, buf, count, t, peer, c, s);
}

EXPORT ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s)
{
	return point_to_point("ncclRecv", false, buf, count, t, peer, c, s);
}

EXPORT ncclResult_t ncclGroupStart(void)
{
	if (!group_depth++) {
		group_ops.clear();
		group_error = ncclSuccess;
	}
	return ncclSuccess;
}

/* The outermost end runs the group's sends and receives as one operation
 * of their stream, unless a call inside failed. */
EXPORT ncclResult_t ncclGroupEnd(void)
{
	if (!group_depth)
		return fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	if (--group_depth)
		return ncclSuccess;
	std::vector<p2p> ops;
	ops.swap(group_ops);
	ncclResult_t r = group_error;
	group_error = ncclSuccess;
	if (r || ops.empty())
		return r;
	std::vector<ncclComm *> cs;
	for (const p2p &o : ops)
		cs.push_back(o.c);
	issue(cs, group_stream, [ops] { run_p2p(ops); });
	return ncclSuccess;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
				  ncclComm_t c, cudaStream_t s)
{
	ncclResult_t r = check_collective("ncclAllReduce", c, send, recv, count, t);
	if (r)
		return r;
	if ((unsigned)op >= ncclNumOps)
		return fail(c, ncclInvalidArgument, "ncclAllReduce: reduction %d is not one of NCCL's", (int)op);
	if (!count)
		return ncclSuccess;
	issue({ c }, s, [c, send, recv, count, t, op] { run_all_reduce(c, (const char *)send, (char *)recv, count, t, op); });
	return ncclSuccess;
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c,
				  cudaStream_t s)
{
	ncclResult_t r = check_collective("ncclAllGather", c, send, recv, count, t);
	if (r || !count)
		return r;
	size_t bytes = count * type_size(t);
	issue({ c }, s, [c, send, recv, bytes, t] { run_all_gather(c, (const char *)send, (char *)recv, bytes, t); });
	return ncclSuccess;
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
				  cudaStream_t s)
{
	/* only the root reads send */
	ncclResult_t r = check_collective("ncclBroadcast", c, comm_ok(c) && c->rank == root ? send : recv, recv, count, t);
	if (r)
		return r;
	if (root < 0 || root >= c->n)
		return fail(c, ncclInvalidArgument, "ncclBroadcast: root %d of a communicator of %d members", root, c->n);
	if (!count)
		return ncclSuccess;
	size_t bytes = count * type_size(t);
	issue({ c }, s, [c, send, recv, bytes, t, root] { run_broadcast(c, (const char *)send, (char *)recv, bytes, t, root); });
	return ncclSuccess;
}
