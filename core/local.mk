# The host: a convenience library (so tests link the same code) and the CLI.
noinst_LTLIBRARIES += core/libphcore.la
core_libphcore_la_SOURCES = \
	core/options.c core/options.h \
	core/inifile.c core/inifile.h \
	core/loader.c core/loader.h \
	core/config.c core/config.h \
	core/model.c core/model.h \
	core/plan.c core/plan.h \
	core/profile.c core/profile.h core/planjson.c core/planjson.h \
	core/engine.c core/engine.h \
	core/optim.c core/optim.h \
	core/data.c core/data.h \
	core/weights.c core/weights.h \
	core/train.c core/train.h \
	core/checkpoint.c core/checkpoint.h \
	core/trace.c core/trace.h \
	core/simulate.c core/simulate.h
core_libphcore_la_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(CJSON_CFLAGS) $(ZLIB_CFLAGS) $(BLAS_CFLAGS)
core_libphcore_la_LIBADD = $(INIH_LIBS) $(CJSON_LIBS) $(ZLIB_LIBS) $(BLAS_LIBS) $(PTHREAD_LIBS) -lm

bin_PROGRAMS += core/pipehost
core_pipehost_SOURCES = core/main.c
core_pipehost_CFLAGS = $(AM_CFLAGS)
core_pipehost_LDADD = core/libphcore.la
