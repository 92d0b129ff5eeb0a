# Partitioner plugins: one libtool module each, one self-contained file each.

pkglib_LTLIBRARIES += plugins/partitioners/uniform.la
plugins_partitioners_uniform_la_SOURCES = plugins/partitioners/uniform.c
plugins_partitioners_uniform_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/partitioners/parameters.la
plugins_partitioners_parameters_la_SOURCES = plugins/partitioners/parameters.c
plugins_partitioners_parameters_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_parameters_la_LIBADD = -lm

pkglib_LTLIBRARIES += plugins/partitioners/histogram.la
plugins_partitioners_histogram_la_SOURCES = plugins/partitioners/histogram.c
plugins_partitioners_histogram_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_histogram_la_LIBADD = -lm

pkglib_LTLIBRARIES += plugins/partitioners/type.la
plugins_partitioners_type_la_SOURCES = plugins/partitioners/type.c
plugins_partitioners_type_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/partitioners/dp.la
plugins_partitioners_dp_la_SOURCES = plugins/partitioners/dp.c
plugins_partitioners_dp_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_dp_la_LIBADD = -lm

pkglib_LTLIBRARIES += plugins/partitioners/explicit.la
plugins_partitioners_explicit_la_SOURCES = plugins/partitioners/explicit.c
plugins_partitioners_explicit_la_LDFLAGS = $(PLUGIN_LDFLAGS)
