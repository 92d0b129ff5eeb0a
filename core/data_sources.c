/* SPDX-License-Identifier: MIT */
/* The registry of data sources: the one table [data] source = NAME is
 * looked up in.  A new source is one file with its ph_data_source and one
 * line here (docs/data-sources.md). */
#include <stdio.h>
#include <string.h>

#include "data_source.h"

static const ph_data_source *const sources[] = {
	&ph_data_source_fashion_mnist,
	&ph_data_source_synthetic,
	&ph_data_source_text,
	&ph_data_source_npy,
	&ph_data_source_tokens,
	NULL,
};

const ph_data_source *ph_data_source_find(const char *name)
{
	for (int i = 0; sources[i]; i++)
		if (strcmp(sources[i]->name, name) == 0)
			return sources[i];
	return NULL;
}

int ph_data_per_byte(const ph_config *c)
{
	return c->data_source && c->data_source->per_byte && c->data.tokenizer != PH_TOKENIZER_BPE;
}

/* The keys the trainer applies to every source, whatever it reads. */
static const char *const common_keys[] = { "source", "shuffle", "limit", "test_limit", NULL };

static int listed(const char *const *keys, const char *key)
{
	for (int k = 0; keys && keys[k]; k++)
		if (strcmp(keys[k], key) == 0)
			return 1;
	return 0;
}

int ph_data_source_reads(const ph_data_source *s, const char *key)
{
	return listed(common_keys, key) || listed(s->keys, key);
}

void ph_data_source_keys(const ph_data_source *s, char *buf, size_t len)
{
	size_t used = 0;
	if (len)
		buf[0] = 0;
	for (int k = 0; s->keys && s->keys[k] && used < len; k++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", k ? ", " : "", s->keys[k]);
}

void ph_data_sources_reading(const char *key, char *buf, size_t len)
{
	size_t used = 0;
	int n = 0, k = 0;
	if (len)
		buf[0] = 0;
	for (int i = 0; sources[i]; i++)
		n += listed(sources[i]->keys, key);
	for (int i = 0; sources[i] && used < len; i++)
		if (listed(sources[i]->keys, key)) {
			k++;
			used += (size_t)snprintf(buf + used, len - used, "%s%s", k == 1 ? "" : k == n ? " or " : ", ",
						 sources[i]->name);
		}
}

void ph_data_source_names(char *buf, size_t len)
{
	size_t used = 0;
	if (len)
		buf[0] = 0;
	for (int i = 0; sources[i] && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", sources[i]->name);
}

void ph_data_sources_print(FILE *f, const char *indent)
{
	for (int i = 0; sources[i]; i++) {
		fprintf(f, "%ssource = %-14s %s", indent, sources[i]->name, sources[i]->help);
		for (int k = 0; sources[i]->keys && sources[i]->keys[k]; k++)
			fprintf(f, "%s%s", k ? ", " : "; reads ", sources[i]->keys[k]);
		fprintf(f, "\n");
	}
}
