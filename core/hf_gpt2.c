/* SPDX-License-Identifier: MIT */
/* Hugging Face GPT-2 safetensors -> pipehost's GPT layers (hf_gpt2.h).
 *
 * The file is checked as ph_safetensors_read checks pipehost's own: header
 * length bounded and inside the file, JSON well formed, every tensor's
 * offsets inside the data section and consistent with its dtype and shape,
 * before a byte is converted.  F16 and BF16 widen to F32 exactly (every
 * half and bfloat16 value is a float).  HF's Conv1D stores a weight as
 * [in, out]; pipehost's gpt_block as PyTorch's Linear, [out, in]: the four
 * matrices of a block are transposed. */
#include "hf_gpt2.h"
#include "json.h"
#include "readfile.h"
#include "weights.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"

#define HF_MAX_HEADER (100ull * 1000 * 1000)
/* A GPT-2 file's tensors have 4 dimensions at most (attn.bias); more than
 * this many is a corrupt header, not a tensor to read. */
#define HF_MAX_DIMS 16
/* Hugging Face's config.json of GPT-2 is about 1 KB; one far past this is
 * not a config.json, and reading it would only spend memory. */
#define HF_MAX_CONFIG (16 << 20)

enum { DT_F32, DT_F16, DT_BF16, DT_OTHER };

typedef struct {
	const char *name;   /* in the parsed JSON */
	int dtype;
	char dtype_name[16];
	int ndim;
	int64_t shape[HF_MAX_DIMS];
	uint64_t begin, end; /* in the data section */
} hf_entry;

typedef struct {
	const char *path;
	int fd;
	uint64_t data_off, data_len;
	cJSON *json;
	hf_entry *e;
	int n;
	const char *prefix; /* "" or "transformer." */
} hf_file;

static void hf_close(hf_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	cJSON_Delete(f->json);
	free(f->e);
	f->fd = -1;
	f->json = NULL;
	f->e = NULL;
}

/* -1 with errno the system's error, or 0 at the end of the file */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len > 0) {
		ssize_t r = pread(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			errno = 0;
		if (r <= 0)
			return -1;
		p += r, len -= (size_t)r, off += (uint64_t)r;
	}
	return 0;
}

/* What a failed read_at says: the system's error, or a file cut short */
static const char *read_why(void)
{
	return errno ? strerror(errno) : "the file ends before it (truncated, or shrank while being read)";
}

static int dtype_size(int dt)
{
	return dt == DT_F32 ? 4 : 2;
}

/* "[a,b,...]" of a shape into buf (HF_MAX_DIMS values of up to 13 digits
 * fit in 256 bytes). */
static const char *shape_str(const hf_entry *e, char *buf, size_t cap)
{
	size_t o = (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < e->ndim && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? "," : "", (long long)e->shape[i]);
	if (o < cap)
		snprintf(buf + o, cap - o, "]");
	return buf;
}

/* The header alone: the file opened, its length bounded and inside the
 * file, the JSON an object.  Enough to tell whose names the file holds;
 * hf_index checks the tensors. */
static int hf_open(hf_file *f, const char *path, ph_err *err)
{
	memset(f, 0, sizeof *f);
	f->path = path;
	f->prefix = "";
	/* a FIFO must not block (readfile.h): init weights are a regular file */
	int rc = ph_open_regular(path, "weights file", "give a safetensors file", &f->fd, err);
	if (rc) {
		f->fd = -1;
		return rc;
	}
	struct stat st;
	unsigned char h8[8];
	if (fstat(f->fd, &st) || st.st_size < 8)
		return ph_fail(err, PH_EINVAL, "%s: too short for a safetensors file", path);
	if (read_at(f->fd, h8, 8, 0))
		return ph_fail(err, PH_EIO, "%s: reading the header length: %s; check the disk and run again", path,
			       read_why());
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | h8[i];
	if (hlen > HF_MAX_HEADER || hlen > (uint64_t)st.st_size - 8)
		return ph_fail(err, PH_EINVAL, "%s: header length %llu is past the end of the file or over 100 MB; "
			       "the file is not safetensors or is truncated", path, (unsigned long long)hlen);
	char *text = malloc(hlen + 1);
	if (!text)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory for the header", path);
	if (read_at(f->fd, text, hlen, 8)) {
		free(text);
		return ph_fail(err, PH_EIO, "%s: reading the header: %s; check the disk and run again", path,
			       read_why());
	}
	text[hlen] = 0;
	int oom;
	f->json = ph_json_parse(text, hlen, NULL, &oom);
	free(text);
	if (oom)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory parsing its %llu-byte header", path,
			       (unsigned long long)hlen);
	f->data_off = 8 + hlen;
	f->data_len = (uint64_t)st.st_size - f->data_off;
	if (!cJSON_IsObject(f->json))
		return ph_fail(err, PH_EINVAL, "%s: the header is not a JSON object", path);
	return PH_OK;
}

/* Every tensor of the header checked (dtype, shape, offsets inside the
 * data, bytes for the shape) into f->e.  Messages say the file was read
 * as Hugging Face GPT-2, so that a fault here is not taken for another
 * format's. */
static int hf_index(hf_file *f, ph_err *err)
{
	const char *path = f->path;
	int count = cJSON_GetArraySize(f->json);
	f->e = calloc((size_t)(count ? count : 1), sizeof *f->e);
	if (!f->e)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory", path);
	for (cJSON *it = f->json->child; it; it = it->next) {
		if (!it->string || !strcmp(it->string, "__metadata__"))
			continue;
		hf_entry *e = &f->e[f->n];
		e->name = it->string;
		cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
		cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
		cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
		if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
			return ph_fail(err, PH_EINVAL, "%s: Hugging Face GPT-2 tensor %s lacks a dtype, a shape or two "
				       "data_offsets; the file is corrupt", path, e->name);
		if (cJSON_GetArraySize(sh) > HF_MAX_DIMS)
			return ph_fail(err, PH_EINVAL, "%s: Hugging Face GPT-2 tensor %s has %d dimensions (GPT-2's have "
				       "at most 4); the file is corrupt", path, e->name, cJSON_GetArraySize(sh));
		snprintf(e->dtype_name, sizeof e->dtype_name, "%s", dt->valuestring);
		e->dtype = !strcmp(dt->valuestring, "F32") ? DT_F32 : !strcmp(dt->valuestring, "F16") ? DT_F16
			   : !strcmp(dt->valuestring, "BF16") ? DT_BF16 : DT_OTHER;
		double numel = 1;
		for (cJSON *d = sh->child; d; d = d->next) {
			if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12 ||
			    d->valuedouble != floor(d->valuedouble))
				return ph_fail(err, PH_EINVAL, "%s: Hugging Face GPT-2 tensor %s has a bad shape (a dimension "
					       "that is not a whole number 0 .. 1e12); the file is corrupt", path, e->name);
			e->shape[e->ndim++] = (int64_t)d->valuedouble;
			numel *= d->valuedouble;
		}
		double b = cJSON_GetArrayItem(off, 0)->valuedouble, en = cJSON_GetArrayItem(off, 1)->valuedouble;
		if (!cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) || b < 0 ||
		    en < b || en > (double)f->data_len || b != floor(b) || en != floor(en))
			return ph_fail(err, PH_EINVAL, "%s: Hugging Face GPT-2 tensor %s: data_offsets [%.0f, %.0f] outside "
				       "the %llu bytes of data; the file is truncated or corrupt", path, e->name, b, en,
				       (unsigned long long)f->data_len);
		e->begin = (uint64_t)b;
		e->end = (uint64_t)en;
		if (e->dtype != DT_OTHER && (double)(e->end - e->begin) != numel * dtype_size(e->dtype)) {
			char got[256];
			return ph_fail(err, PH_EINVAL, "%s: Hugging Face GPT-2 tensor %s %s %s: %llu bytes for %.0f values; "
				       "the file is corrupt", path, e->name, e->dtype_name, shape_str(e, got, sizeof got),
				       (unsigned long long)(e->end - e->begin), numel);
		}
		f->n++;
	}
	return PH_OK;
}

static const hf_entry *hf_find(const hf_file *f, const char *name)
{
	char full[160];
	snprintf(full, sizeof full, "%s%s", f->prefix, name);
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->e[i].name, full))
			return &f->e[i];
	return NULL;
}

/* "" or "transformer." when the header has that wte.weight; NULL when
 * neither.  Looks at the names alone (hf_index has not run). */
static const char *hf_prefix(hf_file *f)
{
	static const char *const prefixes[] = { "", "transformer." };
	for (int i = 0; i < 2; i++) {
		char full[32];
		snprintf(full, sizeof full, "%swte.weight", prefixes[i]);
		if (cJSON_GetObjectItemCaseSensitive(f->json, full))
			return f->prefix = prefixes[i];
	}
	f->prefix = "";
	return NULL;
}

/* Does the opened header hold Hugging Face GPT-2's names?  A file pipehost
 * wrote says so in __metadata__ "producer" (train.c, checkpoint.c,
 * generate.c): its names are layer names, and a layer may be called wte.
 * Without that mark, a file holding every tensor the model asks for
 * (t[0..n), tied copies aside) under pipehost's names is pipehost's too;
 * only then does wte.weight make it GPT-2's. */
static int hf_is_gpt2(hf_file *f, const ph_tensor_ref *t, int n)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->json, "__metadata__");
	const cJSON *producer = cJSON_GetObjectItemCaseSensitive(meta, "producer");
	if (cJSON_IsString(producer) && !strncmp(producer->valuestring, "pipehost", 8))
		return 0;
	if (!hf_prefix(f))
		return 0;
	int all = n > 0;
	for (int i = 0; i < n && all; i++)
		all = t[i].tied_to || cJSON_GetObjectItemCaseSensitive(f->json, t[i].name);
	return !all;
}

int ph_hf_gpt2_detect(const char *path)
{
	hf_file f;
	int yes = !hf_open(&f, path, NULL) && hf_is_gpt2(&f, NULL, 0);
	hf_close(&f);
	return yes;
}

/*
 * HF tensor `name` of shape [rows, cols] (cols 0: 1-D [rows]) into dst as
 * F32.  take_rows < rows reads only the first rows (the position table of
 * a longer context); transpose writes dst [cols, take_rows].
 */
static int hf_get(const hf_file *f, const char *name, int64_t rows, int64_t cols, int64_t take_rows, int transpose,
		  float *dst, ph_err *err)
{
	const hf_entry *e = hf_find(f, name);
	if (!e)
		return ph_fail(err, PH_EINVAL, "%s: no tensor %s%s; a Hugging Face GPT-2 file with as many blocks as the "
			       "model's gpt_block layers is needed (docs/gpt2.md)", f->path, f->prefix, name);
	int want_ndim = cols ? 2 : 1;
	int rows_ok = take_rows < rows ? e->ndim >= 1 && e->shape[0] >= take_rows : e->ndim >= 1 && e->shape[0] == rows;
	if (e->ndim != want_ndim || !rows_ok || (cols && e->shape[1] != cols)) {
		char got[256];
		shape_str(e, got, sizeof got);
		if (e->ndim != want_ndim) /* no choice of vocab or width gives that */
			return ph_fail(err, PH_EINVAL, "%s: %s%s is %s; the model needs [%lld%s%.0lld] (%d dimensions): the "
				       "file is corrupt or not GPT-2's", f->path, f->prefix, name, got, (long long)rows,
				       cols ? "," : "", (long long)cols, want_ndim);
		if (take_rows < rows)
			return ph_fail(err, PH_EINVAL, "%s: %s%s is %s; the model needs at least %lld rows of %lld (n_positions "
				       ">= [data] seq_len)", f->path, f->prefix, name, got, (long long)take_rows, (long long)cols);
		return ph_fail(err, PH_EINVAL, "%s: %s%s is %s; the model needs [%lld%s%.0lld]%s", f->path, f->prefix, name,
			       got, (long long)rows, cols ? "," : "", (long long)cols,
			       cols ? "; check vocab, dim and mlp_ratio against config.json" : "");
	}
	if (e->dtype == DT_OTHER)
		return ph_fail(err, PH_EINVAL, "%s: %s%s is %s; F32, F16 or BF16 are read", f->path, f->prefix, name,
			       e->dtype_name);
	const int64_t r = take_rows < rows ? take_rows : rows, c = cols ? cols : 1;
	const size_t es = (size_t)dtype_size(e->dtype), nb = (size_t)(r * c) * es;
	unsigned char *raw = malloc(nb ? nb : 1);
	if (!raw)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory for %s", f->path, name);
	if (read_at(f->fd, raw, nb, f->data_off + e->begin)) {
		free(raw);
		return ph_fail(err, PH_EIO, "%s: reading %s%s: %s; check the disk and run again", f->path, f->prefix,
			       name, read_why());
	}
	for (int64_t i = 0; i < r; i++)
		for (int64_t j = 0; j < c; j++) {
			const unsigned char *p = raw + (size_t)(i * c + j) * es;
			float v;
			if (e->dtype == DT_F32) {
				uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
				memcpy(&v, &bits, sizeof v);
			} else {
				uint16_t h = (uint16_t)(p[0] | p[1] << 8);
				v = e->dtype == DT_F16 ? ph_half_to_float(h) : ph_bf16_to_float(h);
			}
			dst[transpose ? j * r + i : i * c + j] = v;
		}
	free(raw);
	return PH_OK;
}

/* An integer option of a layer's config by its INI key (heads), or -1. */
static int64_t layer_int_option(const ph_layer *L, const char *key)
{
	const ph_option *o = L->ops->head.options ? ph_options_find(L->ops->head.options, key) : NULL;
	if (!o || o->type != PH_OPT_INT)
		return -1;
	int64_t v;
	memcpy(&v, (const char *)L->cfg->config + o->offset, sizeof v);
	return v;
}

/* config.json's key when present (*v = -1 when absent): a whole number
 * 1 .. 1e6 (GPT-2's are 12 .. 48), checked as a double before any cast so
 * that 1e300 or 2.7 is named as given, never converted. */
static int config_count(const cJSON *j, const char *key, const char *cpath, int *v, ph_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
	*v = -1;
	if (!it)
		return PH_OK;
	if (cJSON_IsNumber(it) && it->valuedouble >= 1 && it->valuedouble <= 1e6 &&
	    it->valuedouble == floor(it->valuedouble)) {
		*v = (int)it->valuedouble;
		return PH_OK;
	}
	char *shown = cJSON_PrintUnformatted(it);
	int rc = ph_fail(err, PH_EINVAL, "%s: %s = %.40s is not a whole number 1 .. 1000000; give Hugging Face's "
			 "config.json of these weights or remove it", cpath, key, shown ? shown : "?");
	free(shown);
	return rc;
}

/* config.json beside the file, when there is one: n_head, n_layer and the
 * activation must be the model's (the weights alone cannot tell heads). */
static int check_config_json(const char *path, const ph_model *m, int nblocks, ph_err *err)
{
	char cpath[4096];
	const char *slash = strrchr(path, '/');
	snprintf(cpath, sizeof cpath, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
	struct stat st;
	if (stat(cpath, &st) != 0)
		return PH_OK; /* no config.json: nothing to check */
	FILE *fp;
	int rc = ph_fopen_regular(cpath, "config.json beside the weights", "remove it or make it a regular file", &fp,
				  err);
	if (rc)
		return rc;
	/* the size of the file opened, not of the name stat'ed above */
	if (fstat(fileno(fp), &st) || st.st_size > HF_MAX_CONFIG) {
		fclose(fp);
		return ph_fail(err, PH_EINVAL, "%s: %lld bytes, too large for a config.json (16 MiB at most); give Hugging "
			       "Face's config.json of these weights or remove it", cpath, (long long)st.st_size);
	}
	char *text = malloc((size_t)st.st_size + 1);
	size_t len = text ? fread(text, 1, (size_t)st.st_size + 1, fp) : 0;
	int rerr = ferror(fp), e = errno;
	fclose(fp);
	if (!text)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory", cpath);
	if (rerr) {
		free(text);
		return ph_fail(err, PH_EIO, "%s: read error: %s; check the disk and run again", cpath, strerror(e));
	}
	if (len != (size_t)st.st_size) {
		free(text);
		return ph_fail(err, PH_EIO, "%s: the file %s while being read; read it again when nothing writes it",
			       cpath, len > (size_t)st.st_size ? "grew" : "shrank");
	}
	int oom;
	cJSON *j = ph_json_parse(text, len, NULL, &oom);
	free(text);
	if (oom)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory parsing it", cpath);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return ph_fail(err, PH_EINVAL, "%s: not a JSON object; give Hugging Face's config.json of these weights "
			       "or remove it", cpath);
	}
	int nl, nh;
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
	rc = config_count(j, "n_layer", cpath, &nl, err);
	if (!rc)
		rc = config_count(j, "n_head", cpath, &nh, err);
	if (!rc && nl >= 0 && nl != nblocks)
		rc = ph_fail(err, PH_EINVAL, "%s: n_layer = %d, the model has %d gpt_block layers; set repeat = %d", cpath,
			     nl, nblocks, nl);
	for (int i = 0; i < m->n && !rc && nh >= 0; i++) {
		int64_t h = strcmp(m->layers[i].ops->head.name, "gpt_block") ? -1 : layer_int_option(&m->layers[i], "heads");
		if (h >= 0 && h != nh)
			rc = ph_fail(err, PH_EINVAL, "%s: n_head = %d, layer %s has heads = %lld; set heads = %d", cpath, nh,
				     m->layers[i].cfg->name, (long long)h, nh);
	}
	if (!rc && act && !cJSON_IsString(act)) {
		char *shown = cJSON_PrintUnformatted(act);
		rc = ph_fail(err, PH_EINVAL, "%s: activation_function = %.40s is not a string; GPT-2's is \"gelu_new\"",
			     cpath, shown ? shown : "?");
		free(shown);
	} else if (!rc && act && strcmp(act->valuestring, "gelu_new") && strcmp(act->valuestring, "gelu_pytorch_tanh")) {
		rc = ph_fail(err, PH_EINVAL, "%s: activation_function = %.40s; gpt_block's gelu is the tanh approximation "
			     "(gelu_new)", cpath, act->valuestring);
	}
	cJSON_Delete(j);
	return rc;
}

static int layer_index(const ph_model *m, const char *name, size_t len)
{
	for (int i = 0; i < m->n; i++)
		if (strlen(m->layers[i].cfg->name) == len && !strncmp(m->layers[i].cfg->name, name, len))
			return i;
	return -1;
}

/* One pipehost tensor from the HF file. */
static int fill_one(const hf_file *f, const ph_model *m, ph_tensor_ref *t, int nlayernorm, ph_err *err)
{
	const char *dot = strrchr(t->name, '.');
	int li = dot ? layer_index(m, t->name, (size_t)(dot - t->name)) : -1;
	if (li < 0)
		return ph_fail(err, PH_EINTERNAL, "tensor %s names no layer of the model", t->name);
	const ph_layer *L = &m->layers[li];
	const char *type = L->ops->head.name, *param = dot + 1, *lname = L->cfg->name;
	const ph_shape *s = &t->shape;
	const int64_t d0 = s->d[0], d1 = s->ndim > 1 ? s->d[1] : 0;
	if (!strcmp(type, "embedding")) {
		if (!strcmp(param, "tokens"))
			return hf_get(f, "wte.weight", d0, d1, d0, 0, t->data, err);
		if (!strcmp(param, "positions")) /* the first T rows of n_positions */
			return hf_get(f, "wpe.weight", d0 + 1, d1, d0, 0, t->data, err);
	} else if (!strcmp(type, "layernorm") && nlayernorm == 1) {
		if (!strcmp(param, "weight"))
			return hf_get(f, "ln_f.weight", d0, 0, d0, 0, t->data, err);
		if (!strcmp(param, "bias"))
			return hf_get(f, "ln_f.bias", d0, 0, d0, 0, t->data, err);
	} else if (!strcmp(type, "layernorm")) {
		return ph_fail(err, PH_EINVAL, "%s: the model has %d layernorm layers besides its blocks; a GPT-2 file has one "
			       "(ln_f)", f->path, nlayernorm);
	} else if (!strcmp(type, "linear") && !strcmp(param, "weight")) {
		/* the head: lm_head when the file has it, else the tied wte */
		return hf_get(f, hf_find(f, "lm_head.weight") ? "lm_head.weight" : "wte.weight", d0, d1, d0, 0, t->data,
			      err);
	} else if (!strcmp(type, "linear")) {
		return ph_fail(err, PH_EINVAL, "%s: layer %s has a bias; GPT-2's head has none: set bias = no", f->path,
			       lname);
	} else if (!strcmp(type, "gpt_block")) {
		int b = 0;
		for (int i = 0; i < li; i++)
			b += !strcmp(m->layers[i].ops->head.name, "gpt_block");
		char n1[64], n2[64];
		const int64_t d = L->in.d[1], rd = L->meta.params[4].shape.d[0];
		int rc;
#define H(buf, part) (snprintf(buf, sizeof buf, "h.%d.%s", b, part), buf)
		if (!strcmp(param, "ln_weight") || !strcmp(param, "ln_bias")) {
			const char *w = param[3] == 'w' ? "weight" : "bias";
			char p1[32], p2[32];
			snprintf(p1, sizeof p1, "ln_1.%s", w);
			snprintf(p2, sizeof p2, "ln_2.%s", w);
			if ((rc = hf_get(f, H(n1, p1), d, 0, d, 0, t->data, err)))
				return rc;
			return hf_get(f, H(n2, p2), d, 0, d, 0, t->data + d, err);
		}
		if (!strcmp(param, "qkv_weight"))
			return hf_get(f, H(n1, "attn.c_attn.weight"), d, 3 * d, d, 1, t->data, err);
		if (!strcmp(param, "proj_weight"))
			return hf_get(f, H(n1, "attn.c_proj.weight"), d, d, d, 1, t->data, err);
		if (!strcmp(param, "fc_weight"))
			return hf_get(f, H(n1, "mlp.c_fc.weight"), d, rd, d, 1, t->data, err);
		if (!strcmp(param, "fc_proj_weight"))
			return hf_get(f, H(n1, "mlp.c_proj.weight"), rd, d, rd, 1, t->data, err);
		if (!strcmp(param, "biases")) {
			if ((rc = hf_get(f, H(n1, "attn.c_attn.bias"), 3 * d, 0, 3 * d, 0, t->data, err)) ||
			    (rc = hf_get(f, H(n1, "attn.c_proj.bias"), d, 0, d, 0, t->data + 3 * d, err)) ||
			    (rc = hf_get(f, H(n1, "mlp.c_fc.bias"), rd, 0, rd, 0, t->data + 4 * d, err)))
				return rc;
			return hf_get(f, H(n1, "mlp.c_proj.bias"), d, 0, d, 0, t->data + 4 * d + rd, err);
		}
#undef H
	}
	return ph_fail(err, PH_EINVAL, "%s: layer %s (%s) parameter %s has no counterpart in a Hugging Face GPT-2 file; "
		       "the model must be embedding, gpt_block x n_layer, layernorm, linear (bias = no), seq_xent",
		       f->path, lname, type, param);
}

/* The file opened with hf_open, known to be GPT-2's (prefix set). */
static int hf_read_open(hf_file *f, const ph_model *m, ph_tensor_ref *t, int n, ph_err *err)
{
	const char *path = f->path;
	int rc = hf_index(f, err);
	int nblocks = 0, nln = 0;
	for (int i = 0; i < m->n; i++) {
		nblocks += !strcmp(m->layers[i].ops->head.name, "gpt_block");
		nln += !strcmp(m->layers[i].ops->head.name, "layernorm");
	}
	char extra[32];
	snprintf(extra, sizeof extra, "h.%d.ln_1.weight", nblocks);
	if (!rc && hf_find(f, extra))
		rc = ph_fail(err, PH_EINVAL, "%s: the file has more than the model's %d blocks (%s%s); set the gpt_block's "
			     "repeat to n_layer", path, nblocks, f->prefix, extra);
	if (!rc)
		rc = check_config_json(path, m, nblocks, err);
	for (int k = 0; k < n && !rc; k++)
		rc = fill_one(f, m, &t[k], nln, err);
	return rc;
}

int ph_hf_gpt2_read(const char *path, const ph_model *m, ph_tensor_ref *t, int n, ph_err *err)
{
	hf_file f;
	int rc = hf_open(&f, path, err);
	if (!rc && !hf_prefix(&f))
		rc = ph_fail(err, PH_EINVAL, "%s: no wte.weight (or transformer.wte.weight); not a GPT-2 file", path);
	if (!rc)
		rc = hf_read_open(&f, m, t, n, err);
	hf_close(&f);
	return rc;
}

/* One look at the header decides the format; from then on the file is
 * read as that format only, so a damaged GPT-2 file is reported as one
 * (its tensor, shape and what the model needs) rather than re-read under
 * pipehost's names and found to lack them.  A header that is not even
 * JSON is ph_safetensors_read's to report. */
int ph_weights_read_any(const char *path, const ph_model *m, ph_tensor_ref *t, int n, int *hf, ph_err *err)
{
	hf_file f;
	ph_err why;
	int orc = hf_open(&f, path, &why);
	/* a read that failed is no answer to "which format?" (a file that
	 * does not open is left to the safetensors reader's words) */
	if ((orc == PH_EIO || orc == PH_ENOMEM) && f.fd >= 0) {
		hf_close(&f);
		*hf = 0;
		*err = why;
		return orc;
	}
	*hf = !orc && hf_is_gpt2(&f, t, n);
	int rc = *hf ? hf_read_open(&f, m, t, n, err) : PH_OK;
	hf_close(&f);
	return *hf ? rc : ph_safetensors_read(path, t, n, err);
}
