# minishard — plain GNU Makefile.
#   make            build bin/configsvr bin/shardd bin/router bin/shardctl
#   make test       unit + integration tests (prints "N passed, N failed")
#   make demo       start a local cluster and show it working
#   make tour       a guided tour of one migration, step by step (TOUR_AUTO=1: no Enter)
#   make bench      measurements, printed and saved to bench-results.json
#   make check-long long soak / chaos runs
#   make check-model  spin checks the migration protocol's Promela model (docs/model/)
#   make lint       cppcheck + shellcheck
#   make SAN=address,undefined test   the same tests under sanitizers
#   make fuzz [FUZZ_SECONDS=N]        libFuzzer on the wire decoder + dispatch (not in test)
# Missing Debian packages are installed by scripts/deps.sh on first use.

CC       ?= cc
SAN      ?=
OPT      ?= -O2
WARN      = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
# Evaluated when a recipe runs (after the deps check), hence '=' not ':='.
PKG_CFLAGS = $(shell pkg-config --cflags libbson-1.0 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs libbson-1.0 2>/dev/null)
CFLAGS    = -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -I. $(PKG_CFLAGS) -MMD -MP
LDLIBS    = $(PKG_LIBS) -lnng -lsqlite3 -lpthread -lm

# Sanitizer builds live apart (objects AND binaries), so they never replace the release
# binaries; the tests find the binaries of the build they run through MS_BIN.
ifneq ($(SAN),)
  CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=$(SAN)
  BUILD   ?= build/san
  BIN     ?= build/san/bin
else
  BUILD   ?= build/rel
  BIN     ?= bin
endif
# Integration suites run two at a time (tests/run.sh): they mostly wait on processes.
JOBS     ?= 2
RUN_ENV   = BUILD=$(BUILD) MS_BIN=$(abspath $(BIN)) JOBS=$(JOBS)

COMMON_SRC    = $(wildcard common/*.c)
SHARDD_SRC    = $(filter-out shardd/main.c,$(wildcard shardd/*.c))
CONFIGSVR_SRC = $(filter-out configsvr/main.c,$(wildcard configsvr/*.c))
ROUTER_SRC    = $(filter-out router/main.c,$(wildcard router/*.c))
CLI_SRC       = $(filter-out cli/main.c,$(wildcard cli/*.c))
UNIT_SRC      = $(wildcard tests/unit/test_*.c)
BENCH_SRC     = $(wildcard tests/bench/bench_*.c)

objs = $(patsubst %.c,$(BUILD)/%.o,$(1))
LIB_COMMON    = $(BUILD)/libcommon.a
LIB_SHARDD    = $(BUILD)/libshardd.a
LIB_CONFIGSVR = $(BUILD)/libconfigsvr.a
LIB_ROUTER    = $(BUILD)/librouter.a
LIB_CLI       = $(BUILD)/libcli.a
ALL_LIBS      = $(LIB_SHARDD) $(LIB_CONFIGSVR) $(LIB_ROUTER) $(LIB_CLI) $(LIB_COMMON)

DEPS_OK   = build/.deps-ok
PROGRAMS  = $(BIN)/configsvr $(BIN)/shardd $(BIN)/router $(BIN)/shardctl
UNIT_BINS = $(patsubst tests/unit/%.c,$(BUILD)/t/%,$(UNIT_SRC))
BENCH_BINS= $(patsubst tests/bench/%.c,$(BUILD)/b/%,$(BENCH_SRC))

.PHONY: all test unit integration demo tour bench check-long lint clean deps fuzz
# Keep every built object: test and bench objects are intermediates of pattern rules and
# make would delete them after each run (and rebuild them the next time).
.SECONDARY:
all: $(PROGRAMS)

# Installs missing packages once; re-checked when the headers vanish.
$(DEPS_OK):
	@if [ ! -f /usr/include/nng/nng.h ] || ! pkg-config --exists libbson-1.0 || [ ! -f /usr/include/sqlite3.h ] || \
	    ! pkg-config --exists libmongoc-1.0; then \
	    bash scripts/deps.sh; fi
	@mkdir -p $(@D) && touch $@
deps:
	bash scripts/deps.sh
# mongosh for test_mongosh.py and the quick start; deps.sh only warns when npm cannot fetch it.
MONGOSH = build/mongosh/node_modules/.bin/mongosh
$(MONGOSH):
	-@bash scripts/deps.sh --mongosh
# MongoDB's Node.js driver 6.x for test_streaming_hello.py; deps.sh only warns when npm cannot.
NODEDRIVER = build/nodedriver/node_modules/mongodb/package.json
$(NODEDRIVER):
	-@bash scripts/deps.sh --nodedriver

$(BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# The web view's files are compiled into the config server (.incbin): rebuild on change.
$(BUILD)/configsvr/http_assets.o: web/index.html web/app.js web/style.css

$(LIB_COMMON): $(call objs,$(COMMON_SRC))
$(LIB_SHARDD): $(call objs,$(SHARDD_SRC))
$(LIB_CONFIGSVR): $(call objs,$(CONFIGSVR_SRC))
$(LIB_ROUTER): $(call objs,$(ROUTER_SRC))
$(LIB_CLI): $(call objs,$(CLI_SRC))
$(BUILD)/lib%.a:
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^ $(if $^,,$(BUILD)/.empty.o)

$(BUILD)/.empty.o: | $(DEPS_OK)
	@mkdir -p $(@D) && echo 'extern int ms_empty_unit; int ms_empty_unit;' | $(CC) -x c -c -o $@ -

$(BIN)/shardd: $(BUILD)/shardd/main.o $(LIB_SHARDD) $(LIB_COMMON)
$(BIN)/configsvr: $(BUILD)/configsvr/main.o $(LIB_CONFIGSVR) $(LIB_COMMON)
$(BIN)/router: $(BUILD)/router/main.o $(LIB_ROUTER) $(LIB_COMMON)
$(BIN)/shardctl: $(BUILD)/cli/main.o $(LIB_CLI) $(LIB_COMMON)
$(PROGRAMS):
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A unit test links only its module and common: tests/unit/test_<module>_*.c
# (module = common | shardd | configsvr | router | cli), so one module's broken file
# never blocks another module's tests.
T_OBJ = $(BUILD)/tests/unit/t.o
$(BUILD)/t/test_common_%: $(BUILD)/tests/unit/test_common_%.o $(T_OBJ) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/t/test_shardd_%: $(BUILD)/tests/unit/test_shardd_%.o $(T_OBJ) $(LIB_SHARDD) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/t/test_configsvr_%: $(BUILD)/tests/unit/test_configsvr_%.o $(T_OBJ) $(LIB_CONFIGSVR) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/t/test_router_%: $(BUILD)/tests/unit/test_router_%.o $(T_OBJ) $(LIB_ROUTER) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/t/test_cli_%: $(BUILD)/tests/unit/test_cli_%.o $(T_OBJ) $(LIB_CLI) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Benchmarks follow the same naming: tests/bench/bench_<module>_*.c; they may use the
# test framework's helpers (t.c has no main).
$(BUILD)/b/bench_common_%: $(BUILD)/tests/bench/bench_common_%.o $(T_OBJ) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/b/bench_shardd_%: $(BUILD)/tests/bench/bench_shardd_%.o $(T_OBJ) $(LIB_SHARDD) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/b/bench_router_%: $(BUILD)/tests/bench/bench_router_%.o $(T_OBJ) $(LIB_ROUTER) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/b/bench_configsvr_%: $(BUILD)/tests/bench/bench_configsvr_%.o $(T_OBJ) $(LIB_CONFIGSVR) $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Client programs run by tests and benches (tests/clients/): nng_client always, the
# libmongoc client when pkg-config finds libmongoc-1.0 (libmongoc-dev, scripts/deps.sh).
MONGOC_OK  = $(shell pkg-config --exists libmongoc-1.0 2>/dev/null && echo yes)
CLIENT_BINS = $(BUILD)/c/nng_client $(if $(MONGOC_OK),$(BUILD)/c/mongoc_client)
$(BUILD)/c/nng_client: $(BUILD)/tests/clients/nng_client.o $(LIB_COMMON)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/c/mongoc_client: tests/clients/mongoc_client.c tests/clients/bench_docs.h | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -I. $(shell pkg-config --cflags libmongoc-1.0) \
	    $(LDFLAGS) -o $@ $< $(shell pkg-config --libs libmongoc-1.0)

# bench_migration.py's baseline (not a bench itself: run.py runs only bench_*).
$(BUILD)/b/raw_pipe: tests/bench/raw_pipe.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lnng -lsqlite3 -lpthread

$(ALL_LIBS): | $(BUILD)/.empty.o

# ---- tests ----------------------------------------------------------------------------
test: all $(UNIT_BINS) $(CLIENT_BINS) | $(MONGOSH) $(NODEDRIVER)
	@$(RUN_ENV) bash tests/run.sh

unit: $(UNIT_BINS)
	@$(RUN_ENV) bash tests/run.sh --unit

integration: all $(CLIENT_BINS) | $(MONGOSH) $(NODEDRIVER)
	@$(RUN_ENV) bash tests/run.sh --integration

check-long: all $(UNIT_BINS) $(CLIENT_BINS)
	@$(RUN_ENV) LONG=1 bash tests/run.sh

# The migration protocol's model (docs/model/README.md), up to 2 crashes; make test runs
# the same checks with at most 1 crash (tests/integration/test_model.py).
.PHONY: check-model
check-model: | $(DEPS_OK)
	@command -v spin >/dev/null || bash scripts/deps.sh
	@bash scripts/check-model.sh

# The seeded chaos soak (tests/chaos/soak.py; docs/testing-with-faults.md):
#   make chaos SECONDS=N SEED=S [SHARDS=N] [NET=auto|on|off]   (SEED unset: a fresh one, printed)
.PHONY: chaos
chaos: all
	@$(RUN_ENV) python3 tests/chaos/soak.py --seconds $(or $(SECONDS),120) $(if $(SEED),--seed $(SEED)) $(if $(SHARDS),--shards $(SHARDS)) --net $(or $(NET),auto)

bench: all $(BENCH_BINS) $(BUILD)/b/raw_pipe $(CLIENT_BINS)
	@$(RUN_ENV) python3 tests/bench/run.py

demo: all
	@bash scripts/demo.sh

tour: all
	@bash scripts/tour.sh

lint: | $(DEPS_OK)
	@bash scripts/deps.sh --lint
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	    --inline-suppr --suppress=missingIncludeSystem --suppress=missingInclude --std=c11 -I. \
	    common configsvr shardd router cli
	@# libbson's headers are left out on purpose: cppcheck 2.10 cannot expand their atomics macros.
	shellcheck scripts/*.sh tests/*.sh .ci/run

# ---- fuzzing (clang's libFuzzer; never part of `make test`) ---------------------------
# tests/fuzz/fuzz_wire.c: wire messages → decoder → shardd's dispatch → reply encoder.
# Objects are instrumented apart under build/fuzz; new inputs libFuzzer finds go to
# build/fuzz/corpus-wire (the seeds in tests/fuzz/corpus/wire are only read); a crash is
# written to build/fuzz/ as crash-<sha1>, to replay with build/fuzz/fuzz_wire FILE.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_BUILD    = build/fuzz
FUZZ_SAN      = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -g -O1 -I. $(PKG_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_OBJS     = $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(COMMON_SRC) $(SHARDD_SRC))

$(FUZZ_BUILD)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<
$(FUZZ_BUILD)/fuzz_wire: $(FUZZ_BUILD)/tests/fuzz/fuzz_wire.o $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
fuzz:
	@command -v $(FUZZ_CC) >/dev/null || bash scripts/deps.sh --fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BUILD)/fuzz_wire
	@mkdir -p $(FUZZ_BUILD)/corpus-wire
	cd $(FUZZ_BUILD) && ./fuzz_wire -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 corpus-wire ../../tests/fuzz/corpus/wire

clean:
	rm -rf build bin bench-results.json

# (build/mongosh holds npm packages, some with .d files of their own: not ours)
-include $(shell find build -name node_modules -prune -o -name '*.d' -print 2>/dev/null)
