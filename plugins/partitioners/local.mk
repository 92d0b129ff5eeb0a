# SPDX-License-Identifier: MIT
# Partitioner plugins: one libtool module each, one file each, all linked
# with cuts (the cut points, problem checks and split-finding dynamic
# programmes they share), a convenience library that is not installed.

noinst_LTLIBRARIES += plugins/partitioners/libcuts.la
plugins_partitioners_libcuts_la_SOURCES = plugins/partitioners/cuts.c plugins/partitioners/cuts.h
plugins_partitioners_libcuts_la_LIBADD = -lm

pkglib_LTLIBRARIES += plugins/partitioners/uniform.la
plugins_partitioners_uniform_la_SOURCES = plugins/partitioners/uniform.c
plugins_partitioners_uniform_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_uniform_la_LIBADD = plugins/partitioners/libcuts.la

pkglib_LTLIBRARIES += plugins/partitioners/parameters.la
plugins_partitioners_parameters_la_SOURCES = plugins/partitioners/parameters.c
plugins_partitioners_parameters_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_parameters_la_LIBADD = plugins/partitioners/libcuts.la

pkglib_LTLIBRARIES += plugins/partitioners/histogram.la
plugins_partitioners_histogram_la_SOURCES = plugins/partitioners/histogram.c
plugins_partitioners_histogram_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_histogram_la_LIBADD = plugins/partitioners/libcuts.la -lm

pkglib_LTLIBRARIES += plugins/partitioners/type.la
plugins_partitioners_type_la_SOURCES = plugins/partitioners/type.c
plugins_partitioners_type_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_type_la_LIBADD = plugins/partitioners/libcuts.la

pkglib_LTLIBRARIES += plugins/partitioners/dp.la
plugins_partitioners_dp_la_SOURCES = plugins/partitioners/dp.c
plugins_partitioners_dp_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_dp_la_LIBADD = plugins/partitioners/libcuts.la -lm

pkglib_LTLIBRARIES += plugins/partitioners/explicit.la
plugins_partitioners_explicit_la_SOURCES = plugins/partitioners/explicit.c
plugins_partitioners_explicit_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_partitioners_explicit_la_LIBADD = plugins/partitioners/libcuts.la
