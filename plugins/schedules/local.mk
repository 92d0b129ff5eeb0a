# SPDX-License-Identifier: MIT
# Schedule plugins: one libtool module each.  Automake names can't start
# with a digit, so 1f1b lives in onef1b.la (its INI name is still "1f1b").

pkglib_LTLIBRARIES += plugins/schedules/gpipe.la
plugins_schedules_gpipe_la_SOURCES = plugins/schedules/gpipe.c
plugins_schedules_gpipe_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/onef1b.la
plugins_schedules_onef1b_la_SOURCES = plugins/schedules/onef1b.c plugins/schedules/order-1f1b.h
plugins_schedules_onef1b_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/interleaved.la
plugins_schedules_interleaved_la_SOURCES = plugins/schedules/interleaved.c
plugins_schedules_interleaved_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/zbh1.la
plugins_schedules_zbh1_la_SOURCES = plugins/schedules/zbh1.c
plugins_schedules_zbh1_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/table.la
plugins_schedules_table_la_SOURCES = plugins/schedules/table.c
plugins_schedules_table_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/twobw.la
plugins_schedules_twobw_la_SOURCES = plugins/schedules/twobw.c plugins/schedules/order-1f1b.h
plugins_schedules_twobw_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/schedules/pipedream.la
plugins_schedules_pipedream_la_SOURCES = plugins/schedules/pipedream.c plugins/schedules/order-1f1b.h
plugins_schedules_pipedream_la_LDFLAGS = $(PLUGIN_LDFLAGS)
