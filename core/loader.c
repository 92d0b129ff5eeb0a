/* SPDX-License-Identifier: MIT */
/* Plugin loader: dlopen(RTLD_NOW|RTLD_LOCAL), one descriptor symbol, ABI and
 * hook checks, duplicate names refused; nothing is dlopen'ed before its real
 * path and every directory above it pass the trust check (loader-trust.c). */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "loader.h"
#include "options.h"

const char *ph_kind_name(ph_plugin_kind k)
{
	static const char *n[] = { "layer", "partitioner", "schedule" };
	return k < PH_KIND_COUNT ? n[k] : "?";
}

static int grow(void **p, int n, int *cap, size_t size)
{
	if (n < *cap)
		return 0;
	int nc = *cap ? *cap * 2 : 16;
	void *q = realloc(*p, (size_t)nc * size);
	if (!q)
		return -1;
	*p = q;
	*cap = nc;
	return 0;
}

/* Smallest ops struct a plugin may have: everything this ABI major requires. */
static uint32_t min_size(ph_plugin_kind k)
{
	switch (k) {
	case PH_KIND_LAYER: return (uint32_t)(offsetof(ph_layer_ops, backward) + sizeof(void *));
	case PH_KIND_PARTITIONER: return (uint32_t)sizeof(ph_partitioner_ops);
	case PH_KIND_SCHEDULE: return (uint32_t)sizeof(ph_schedule_ops);
	default: return 0;
	}
}

static int check_version(const char *file, const char *what, unsigned major, unsigned minor, ph_err *err)
{
	if (major != PH_ABI_MAJOR)
		return ph_fail(err, PH_EINVAL,
			       "plugin %s: %s built for plugin ABI %u.%u, this pipehost speaks %d.%d; "
			       "rebuild it against this pipehost's headers (pkg-config --cflags pipehost)",
			       file, what, major, minor, PH_ABI_MAJOR, PH_ABI_MINOR);
	if (minor > PH_ABI_MINOR)
		return ph_fail(err, PH_EINVAL,
			       "plugin %s: %s built for plugin ABI %u.%u, newer than this pipehost's %d.%d; "
			       "upgrade pipehost or rebuild the plugin against its headers",
			       file, what, major, minor, PH_ABI_MAJOR, PH_ABI_MINOR);
	return PH_OK;
}

/* A layer's CUDA hooks (ABI 1.4): forward and backward, and the split
 * backward exactly when the layer's own hooks have it, since the host plans
 * one split for every device. */
static int check_cuda_ops(const char *file, const char *what, const ph_layer_ops *l, ph_err *err)
{
	const ph_layer_device_ops *cu = ph_layer_cuda_ops(l);
	if (!cu)
		return PH_OK;
	const uint32_t need = (uint32_t)(offsetof(ph_layer_device_ops, backward) + sizeof(void *));
	if (cu->struct_size < need)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s has a %u-byte table of CUDA hooks, ABI %d needs %u; "
			       "set its struct_size to sizeof(ph_layer_device_ops) and rebuild",
			       file, what, cu->struct_size, PH_ABI_MAJOR, need);
	const int has_in = cu->struct_size >= offsetof(ph_layer_device_ops, backward_input) + sizeof(void *) &&
			   cu->backward_input;
	const int has_w = cu->struct_size >= offsetof(ph_layer_device_ops, backward_weight) + sizeof(void *) &&
			  cu->backward_weight;
	const char *missing = !cu->forward ? "CUDA forward" : !cu->backward ? "CUDA backward" : NULL;
	if (missing)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s lacks the required %s hook; implement it and rebuild",
			       file, what, missing);
	if (has_in != has_w || has_in != ph_layer_has_split_backward(l))
		return ph_fail(err, PH_EINVAL,
			       "plugin %s: %s: its CUDA hooks %s backward_input and backward_weight, its own hooks %s; "
			       "give both tables the split backward, or neither",
			       file, what, has_in && has_w ? "have" : has_in || has_w ? "have one of" : "lack",
			       ph_layer_has_split_backward(l) ? "have them" : "do not");
	return PH_OK;
}

/* The keys the host reads itself in a plugin's INI section ([layer NAME]:
 * type, repeat, cut, tie; [partition]: type, cost, ...; [schedule]:
 * type): the INI gives such a key to the host, never to the plugin. */
static const ph_option *host_keys(ph_plugin_kind kind)
{
	return kind == PH_KIND_LAYER ? ph_layer_common_options
	       : kind == PH_KIND_PARTITIONER ? ph_partition_options : ph_schedule_options;
}

/* An option table whose names the INI can tell apart: no name twice (the
 * INI would set one, --list-plugins show both) and none the host reads in
 * the plugin's section (the INI could never set it). */
static int check_option_names(const char *file, const char *what, ph_plugin_kind kind, const ph_option *opts,
			      int nopt, ph_err *err)
{
	for (int i = 0; i < nopt; i++) {
		for (int j = 0; j < i; j++)
			if (!strcmp(opts[i].name, opts[j].name))
				return ph_fail(err, PH_EINVAL, "plugin %s: %s has two options named %s (options %d and %d), "
					       "and an INI key can set only one; rename or remove one and rebuild",
					       file, what, opts[i].name, j, i);
		if (ph_options_find(host_keys(kind), opts[i].name))
			return ph_fail(err, PH_EINVAL, "plugin %s: %s has an option named %s, a key the host reads itself "
				       "in the %s's INI section, so the INI could never set it; rename it and rebuild",
				       file, what, opts[i].name, ph_kind_name(kind));
	}
	return PH_OK;
}

static int check_ops(const char *file, ph_plugin_kind kind, const void *ops, ph_err *err)
{
	const ph_ops_head *h = ops;
	if (!h)
		return ph_fail(err, PH_EINVAL, "plugin %s: a NULL %s in its descriptor's list; end the list with "
			       "one NULL", file, ph_kind_name(kind));
	if (!h->name || !h->name[0])
		return ph_fail(err, PH_EINVAL, "plugin %s: a %s without a name; set head.name", file,
			       ph_kind_name(kind));
	if (strnlen(h->name, PH_MAX_PLUGIN_NAME) == PH_MAX_PLUGIN_NAME)
		return ph_fail(err, PH_EINVAL, "plugin %s: a %s whose name is %d characters or more; shorten it",
			       file, ph_kind_name(kind), PH_MAX_PLUGIN_NAME);
	/* A run names a plugin in an INI value (type = NAME, trimmed) and in
	 * --set keys (layer.NAME.key, cut at dots): a space at either end, a
	 * dot or a control character makes a plugin no run can take.  The
	 * names stay plain ASCII, as every built-in's is. */
	for (const unsigned char *q = (const unsigned char *)h->name; *q; q++)
		if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_' ||
		      *q == '-')) {
			char shown[PH_ECHO_BYTES_MAX], ch[16];
			snprintf(ch, sizeof ch, "'%c'", *q);
			return ph_fail(err, PH_EINVAL, "plugin %s: %s name \"%s\" has %s; a plugin name takes ASCII letters, "
				       "digits, '_' and '-' only (an INI trims spaces, --set cuts keys at dots): rename it",
				       file, ph_kind_name(kind), ph_echo_bytes(h->name, shown, sizeof shown),
				       *q == ' ' ? "a space" : *q == '.' ? "a dot" : *q < 0x20 || *q == 0x7f ? "a control character"
				       : *q >= 0x80 ? "a character outside ASCII" : ch);
		}
	char what[128];
	snprintf(what, sizeof what, "%s '%s'", ph_kind_name(kind), h->name);
	int rc = check_version(file, what, h->abi_major, h->abi_minor, err);
	if (rc)
		return rc;
	if (h->struct_size > PH_MAX_OPS_SIZE)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s claims a %u-byte ops struct, more than any ABI %d.x "
			       "has; its descriptor is broken: rebuild it", file, what, h->struct_size, PH_ABI_MAJOR);
	if (h->struct_size < min_size(kind))
		return ph_fail(err, PH_EINVAL, "plugin %s: %s has a %u-byte ops struct, ABI %d needs %u; rebuild it",
			       file, what, h->struct_size, PH_ABI_MAJOR, min_size(kind));
	const char *missing = NULL;
	if (kind == PH_KIND_LAYER) {
		const ph_layer_ops *l = ops;
		if (!l->create) missing = "create";
		else if (!l->destroy) missing = "destroy";
		else if (!l->meta) missing = "meta";
		else if (!l->forward) missing = "forward";
		else if (!l->backward) missing = "backward";
		else if (!l->devices) missing = "devices";
		else if (h->struct_size >= offsetof(ph_layer_ops, backward_weight) + sizeof(void *) &&
			 !l->backward_input != !l->backward_weight)
			missing = l->backward_input ? "backward_weight (it has backward_input; give both or neither)"
						    : "backward_input (it has backward_weight; give both or neither)";
		else if ((rc = check_cuda_ops(file, what, l, err)))
			return rc;
	} else if (kind == PH_KIND_PARTITIONER) {
		if (!((const ph_partitioner_ops *)ops)->partition) missing = "partition";
	} else {
		if (!((const ph_schedule_ops *)ops)->generate) missing = "generate";
	}
	if (missing)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s lacks the required %s hook; implement it and rebuild",
			       file, what, missing);
	/* a schedule orders 1 chunk per rank at least: 0 or less would turn
	 * every [run] chunks into "lower it", which no value satisfies */
	if (kind == PH_KIND_SCHEDULE && ((const ph_schedule_ops *)ops)->max_chunks_per_rank < 1)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s has max_chunks_per_rank = %d; set it to 1 (a schedule "
			       "without virtual chunks) or to the most chunks per rank it orders, and rebuild",
			       file, what, ((const ph_schedule_ops *)ops)->max_chunks_per_rank);
	/* The defaults must parse: run the table once on a scratch config. */
	if (h->options) {
		if (h->config_size == 0 || h->config_size > (1u << 20))
			return ph_fail(err, PH_EINVAL, "plugin %s: %s has options but config_size %zu", file, what,
				       h->config_size);
		int nopt = 0;
		while (nopt <= PH_MAX_PLUGIN_OPTIONS && h->options[nopt].name)
			nopt++;
		if (nopt > PH_MAX_PLUGIN_OPTIONS)
			return ph_fail(err, PH_EINVAL, "plugin %s: %s lists over %d options (is its table missing "
				       "PH_OPT_END?); fix the plugin", file, what, PH_MAX_PLUGIN_OPTIONS);
		for (int i = 0; i < nopt; i++)
			if (!h->options[i].name[0] || (unsigned)h->options[i].type > PH_OPT_INTLIST)
				return ph_fail(err, PH_EINVAL, "plugin %s: %s option %d has an empty name or an unknown "
					       "type %d; fix the plugin", file, what, i, (int)h->options[i].type);
		if ((rc = check_option_names(file, what, kind, h->options, nopt, err)))
			return rc;
		void *cfg = calloc(1, h->config_size);
		if (!cfg)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (const ph_option *o = h->options; o->name; o++) {
			size_t need = o->type == PH_OPT_INT ? sizeof(int64_t) : o->type == PH_OPT_FLOAT ? sizeof(double)
				    : o->type == PH_OPT_STRING ? PH_STR_MAX : o->type == PH_OPT_INTLIST ? sizeof(ph_intlist)
				    : sizeof(int);
			if (o->offset > h->config_size || need > h->config_size - o->offset) {
				free(cfg);
				return ph_fail(err, PH_EINVAL, "plugin %s: %s option %s lies outside its config struct",
					       file, what, o->name);
			}
		}
		ph_err e2;
		rc = ph_options_defaults(h->options, cfg, &e2);
		free(cfg);
		if (rc)
			return ph_fail(err, PH_EINVAL, "plugin %s: %s: %s", file, what, e2.msg);
	}
	return PH_OK;
}

static int add_ops(ph_registry *r, ph_plugin_kind kind, const void *ops, int file, ph_err *err)
{
	const ph_ops_head *h = ops;
	int rc = check_ops(r->files[file], kind, ops, err);
	if (rc)
		return rc;
	for (int i = 0; i < r->nentries; i++)
		if (r->entries[i].kind == kind && strcmp(r->entries[i].head->name, h->name) == 0)
			return ph_fail(err, PH_EINVAL, "%s '%s' is provided by both %s and %s; remove one from the plugin path",
				       ph_kind_name(kind), h->name, r->files[r->entries[i].file], r->files[file]);
	if (grow((void **)&r->entries, r->nentries, &r->entries_cap, sizeof *r->entries))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (kind == PH_KIND_LAYER) {
		/* The host's own copy, at this ABI's size: a field an older plugin
		 * lacks reads as zero, and devices lists every device the layer
		 * runs on, its CUDA hooks' included (ph_layer_devices). */
		const ph_layer_ops *l = ops;
		ph_layer_ops *copy = calloc(1, sizeof *copy);
		if (!copy)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		memcpy(copy, l, h->struct_size < sizeof *copy ? h->struct_size : sizeof *copy);
		copy->devices = ph_layer_devices(l);
		ops = copy;
		h = &copy->head;
	}
	r->entries[r->nentries++] = (ph_registry_entry){ kind, h, ops, file };
	return PH_OK;
}

/* Drop entries [from, nentries), freeing the host's copies of layer ops. */
static void drop_entries(ph_registry *r, int from)
{
	for (int i = from; i < r->nentries; i++)
		if (r->entries[i].kind == PH_KIND_LAYER)
			free((void *)r->entries[i].ops);
	r->nentries = from;
}

/* A crash while a plugin is opened or its descriptor read (a constructor,
 * a wild pointer in the descriptor) must still name the file: the handler
 * writes one line, then the signal takes its default action. */
static char loading_file[1100];

static void on_load_crash(int sig)
{
	static const char a[] = "pipehost: plugin ", b[] = " crashed while being loaded (its descriptor or a "
							      "constructor is broken); fix it or remove it from the plugin path\n";
	ssize_t w = write(STDERR_FILENO, a, sizeof a - 1);
	w = write(STDERR_FILENO, loading_file, strlen(loading_file));
	w = write(STDERR_FILENO, b, sizeof b - 1);
	(void)w;
	signal(sig, SIG_DFL);
	raise(sig);
}

typedef struct {
	struct sigaction segv, bus, ill, fpe;
} crash_guard;

static void guard_on(crash_guard *g, const char *file)
{
	snprintf(loading_file, sizeof loading_file, "%s", file);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_load_crash;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESETHAND;
	sigaction(SIGSEGV, &sa, &g->segv);
	sigaction(SIGBUS, &sa, &g->bus);
	sigaction(SIGILL, &sa, &g->ill);
	sigaction(SIGFPE, &sa, &g->fpe);
}

static void guard_off(crash_guard *g)
{
	sigaction(SIGSEGV, &g->segv, NULL);
	sigaction(SIGBUS, &g->bus, NULL);
	sigaction(SIGILL, &g->ill, NULL);
	sigaction(SIGFPE, &g->fpe, NULL);
}

/* Entries of a descriptor list, at most PH_MAX_PLUGIN_ENTRIES, or -1. */
static int list_len(const void *const *list)
{
	int n = 0;
	while (list && n <= PH_MAX_PLUGIN_ENTRIES && list[n])
		n++;
	return n > PH_MAX_PLUGIN_ENTRIES ? -1 : n;
}

static int read_descriptor(ph_registry *r, const char *file, void *dl, int idx, ph_err *err)
{
	ph_plugin_fn fn;
	*(void **)&fn = dlsym(dl, PH_PLUGIN_SYMBOL);
	if (!fn)
		return ph_fail(err, PH_EINVAL,
			       "%s is not a pipehost plugin (it exports no %s symbol); remove it from the plugin path",
			       file, PH_PLUGIN_SYMBOL);
	const ph_plugin *d = fn();
	if (!d)
		return ph_fail(err, PH_EINVAL, "plugin %s: %s() returned NULL", file, PH_PLUGIN_SYMBOL);
	int rc = check_version(file, "descriptor", d->abi_major, d->abi_minor, err);
	if (rc)
		return rc;
	const void *const *lists[] = { (const void *const *)d->layers, (const void *const *)d->partitioners,
				       (const void *const *)d->schedules };
	for (int k = 0; k < PH_KIND_COUNT; k++)
		if (list_len(lists[k]) < 0)
			return ph_fail(err, PH_EINVAL, "plugin %s: its %s list has over %d entries (no NULL at its end?); "
				       "fix the plugin", file, ph_kind_name((ph_plugin_kind)k), PH_MAX_PLUGIN_ENTRIES);
	for (int k = 0; !rc && k < PH_KIND_COUNT; k++)
		for (int i = 0; !rc && lists[k] && lists[k][i]; i++)
			rc = add_ops(r, (ph_plugin_kind)k, lists[k][i], idx, err);
	return rc;
}

int ph_registry_load_file(ph_registry *r, const char *file, ph_err *err)
{
	for (int i = 0; i < r->nfiles; i++)
		if (strcmp(r->files[i], file) == 0)
			return PH_OK;
	if (strlen(file) >= sizeof r->files[0])
		return ph_fail(err, PH_EINVAL, "plugin path too long (%zu bytes, at most %zu): %.200s...; move the "
			       "plugin to a shorter path", strlen(file), sizeof r->files[0] - 1, file);
	int rc = r->allow_writable ? PH_OK : ph_plugin_trust(file, 0, err);
	if (rc)
		return rc;
	struct stat st;
	if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
		return ph_fail(err, PH_EINVAL, "plugin %s is an empty file, not a shared library; rebuild it or "
			       "remove it from the plugin path", file);
	if (grow((void **)&r->files, r->nfiles, &r->files_cap, sizeof *r->files))
		return ph_fail(err, PH_ENOMEM, "out of memory loading plugin %s", file);
	/* into a temporary: a failed realloc keeps the handles the registry
	 * must still close */
	void **handles = realloc(r->handles, (size_t)r->files_cap * sizeof *r->handles);
	if (!handles)
		return ph_fail(err, PH_ENOMEM, "out of memory loading plugin %s", file);
	r->handles = handles;
	crash_guard g;
	guard_on(&g, file);
	void *dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		guard_off(&g);
		const char *why = dlerror();
		/* a file we may not read: its permissions are the fix, not a rebuild */
		if (access(file, R_OK) != 0 || (why && strstr(why, strerror(EACCES))))
			return ph_fail(err, PH_EINVAL, "plugin %s cannot be loaded: %s; it is not readable by this user: "
				       "check its permissions (chmod a+r %s) and those of its directories",
				       file, why && why[0] ? why : strerror(EACCES), file);
		return ph_fail(err, PH_EINVAL, "plugin %s cannot be loaded: %s; rebuild it if it is damaged, "
			       "or check `ldd %s` for missing libraries",
			       file, why && why[0] ? why : "the dynamic loader gave no reason", file);
	}
	/* One file under two spellings (dir//x.so, a symlink): the dynamic
	 * loader hands back the same library, whose plugins are already here
	 * (they were once "provided by both" spellings). */
	for (int i = 0; i < r->nfiles; i++)
		if (r->handles[i] == dl) {
			guard_off(&g);
			dlclose(dl);
			return PH_OK;
		}
	int idx = r->nfiles++;
	strcpy(r->files[idx], file);
	r->handles[idx] = dl;
	int first = r->nentries;
	rc = read_descriptor(r, file, dl, idx, err);
	guard_off(&g);
	if (rc) {
		drop_entries(r, first); /* nothing half-loaded stays registered */
		r->nfiles--;
		dlclose(dl);
		return rc;
	}
	return PH_OK;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Does the file hold "name" as the end of a C string?  Reading a file runs
 * none of its code: this picks the candidates for a plugin name without
 * dlopen'ing (and so running the constructors of) every .so on the path;
 * --check-plugin's name check uses it too.  The linker may share a
 * string's tail ("relu" inside "leaky_relu"), so a match on the tail alone
 * counts: a false match only loads one file more.  unreadable: the answer
 * for a file that cannot be opened or mapped, or is not a regular file. */
int ph_file_mentions(const char *file, const char *name, int unreadable)
{
	int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return unreadable;
	struct stat st;
	int hit = unreadable;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			hit = memmem(m, (size_t)st.st_size, name, strlen(name) + 1) != NULL;
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	return hit;
}

/* Load the *.so in dir (sorted by name, so the order never depends on the
 * file system); with name set, only those that mention it. */
static int load_dir(ph_registry *r, const char *dir, const char *name, ph_err *err)
{
	DIR *d = opendir(dir);
	if (!d) {
		/* a path entry that does not exist is not an error; one that
		 * exists but cannot be read is: its plugins would go missing
		 * without a word, and "unknown plugin" would hide why */
		if (errno == ENOENT || errno == ENOTDIR)
			return PH_OK;
		int e = errno;
		return ph_fail(err, PH_EINVAL, "plugin directory %s cannot be read: %s; give this user read and search "
			       "permission on it (chmod a+rx %s) or take it off the plugin path", dir, strerror(e), dir);
	}
	int rc0 = r->allow_writable ? PH_OK : ph_plugin_trust(dir, 1, err);
	if (rc0) {
		closedir(d);
		return rc0;
	}
	char **names = NULL;
	int n = 0, cap = 0, rc = PH_OK;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 4 || strcmp(de->d_name + len - 3, ".so") != 0)
			continue;
		if (grow((void **)&names, n, &cap, sizeof *names) || !(names[n] = strdup(de->d_name))) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			break;
		}
		n++;
	}
	closedir(d);
	if (!rc && n > 0) /* qsort's array may not be NULL, even empty (UBSan) */
		qsort(names, (size_t)n, sizeof *names, cmp_str);
	for (int i = 0; i < n; i++) {
		if (!rc) {
			char file[PATH_MAX];
			if ((size_t)snprintf(file, sizeof file, "%s/%s", dir, names[i]) >= sizeof file)
				rc = ph_fail(err, PH_EINVAL, "plugin directory %.200s...: the path of %s in it is longer than "
					     "%d bytes; move the plugins to a shorter path", dir, names[i], PATH_MAX - 1);
			else if (!name || ph_file_mentions(file, name, 1)) /* an unreadable one: let the load report it */
				rc = ph_registry_load_file(r, file, err);
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

/* Add dir to what "none found" lists, once: a search by name walks the
 * path once per plugin name the INI uses. */
static void note_searched(ph_registry *r, const char *dir)
{
	struct stat st;
	char entry[4200];
	snprintf(entry, sizeof entry, "%s%s", dir, stat(dir, &st) == 0 && S_ISDIR(st.st_mode) ? "" : " (missing)");
	size_t n = strlen(entry);
	for (const char *p = r->searched; (p = strstr(p, entry)); p += n)
		if ((p == r->searched || p[-1] == ' ') && (p[n] == ',' || p[n] == 0))
			return;
	size_t used = strlen(r->searched);
	snprintf(r->searched + used, sizeof r->searched - used, "%s%s", used ? ", " : "", entry);
}

static int each_dir(ph_registry *r, const char *list, const char *name, ph_err *err)
{
	char buf[8192];
	snprintf(buf, sizeof buf, "%s", list ? list : "");
	char *save = NULL;
	for (char *dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		/* what "none found" lists: every directory searched, the missing marked */
		note_searched(r, dir);
		int rc = load_dir(r, dir, name, err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

int ph_registry_load_path(ph_registry *r, const char *list, ph_err *err)
{
	return each_dir(r, list, NULL, err);
}

void ph_registry_search_path(ph_registry *r, const char *list)
{
	snprintf(r->search, sizeof r->search, "%s", list ? list : "");
	r->search_all = 0;
}

int ph_registry_load_name(ph_registry *r, ph_plugin_kind kind, const char *name, ph_err *err)
{
	if (r->search_all)
		return PH_OK;
	if (!name[0]) { /* no name to look for: every plugin, for the list of them */
		r->search_all = 1;
		return each_dir(r, r->search, NULL, err);
	}
	/* every directory: the same name in two files is refused, as before */
	int rc = each_dir(r, r->search, name, err);
	if (rc || ph_registry_find(r, kind, name))
		return rc;
	/* not found by its name (a typo, or a plugin that builds its name at
	 * run time): load the rest, for the "did you mean" and the list */
	r->search_all = 1;
	return each_dir(r, r->search, NULL, err);
}

const void *ph_registry_find(const ph_registry *r, ph_plugin_kind kind, const char *name)
{
	for (int i = 0; i < r->nentries; i++)
		if (r->entries[i].kind == kind && strcmp(r->entries[i].head->name, name) == 0)
			return r->entries[i].ops;
	return NULL;
}

const char *ph_registry_file_of(const ph_registry *r, const void *ops)
{
	for (int i = 0; i < r->nentries; i++)
		if (r->entries[i].ops == ops)
			return r->files[r->entries[i].file];
	return "?";
}

const char *ph_registry_suggest(const ph_registry *r, ph_plugin_kind kind, const char *name)
{
	const char *best = NULL;
	int bd = 1 << 30;
	for (int i = 0; i < r->nentries; i++) {
		if (r->entries[i].kind != kind)
			continue;
		int d = ph_edit_distance(name, r->entries[i].head->name);
		if (d < bd) {
			bd = d;
			best = r->entries[i].head->name;
		}
	}
	size_t len = strlen(name);
	return bd <= (len < 3 ? 1 : (int)(len / 3 + 1)) ? best : NULL;
}

void ph_registry_names(const ph_registry *r, ph_plugin_kind kind, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < r->nentries && used + 1 < len; i++) {
		if (r->entries[i].kind != kind)
			continue;
		int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", r->entries[i].head->name);
		if (w < 0)
			break;
		used += (size_t)w;
	}
	if (!buf[0])
		snprintf(buf, len, "none in %s (add a --plugin-dir)", r->searched[0] ? r->searched : "no directory");
}

void ph_registry_print(FILE *f, const ph_registry *r)
{
	for (int k = 0; k < PH_KIND_COUNT; k++) {
		fprintf(f, "%ss:\n", ph_kind_name((ph_plugin_kind)k));
		for (int i = 0; i < r->nentries; i++) {
			const ph_registry_entry *e = &r->entries[i];
			if ((int)e->kind != k)
				continue;
			fprintf(f, "  %-14s %s\n", e->head->name, e->head->help ? e->head->help : "");
			if (e->kind == PH_KIND_LAYER) {
				uint32_t d = ((const ph_layer_ops *)e->ops)->devices; /* with its CUDA hooks' */
				fprintf(f, "  %-14s devices: %s%s\n", "", d & PH_DEV_CPU ? "cpu" : "",
					d & PH_DEV_CUDA ? (d & PH_DEV_CPU ? ", cuda" : "cuda") : "");
			}
			fprintf(f, "  %-14s from %s\n", "", r->files[e->file]);
			if (e->head->options)
				ph_options_print(f, e->head->options, "      ");
		}
	}
}

void ph_registry_free(ph_registry *r)
{
	drop_entries(r, 0);
	for (int i = 0; i < r->nfiles; i++)
		if (r->handles[i])
			dlclose(r->handles[i]);
	free(r->files);
	free(r->handles);
	free(r->entries);
	memset(r, 0, sizeof *r);
}
