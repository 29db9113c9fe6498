# omnifs - the one entry point.  `make run`, `make check`, `make bench`.

VERSION  := 0.1.0
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    ?= build
SAN      ?=
# prove shows each failing test's own line (its name, and pytest's reason
# for a test of the Python package): CI's log keeps little more than that.
PROVE_FLAGS ?= --failures
# A bare `make` builds the programs: the CUDA rules below come first.
.DEFAULT_GOAL := all

# What a fresh Debian machine needs to build, run and test omnifs.
DEB_PKGS := gcc make pkg-config libfuse3-dev fuse3 libxxhash-dev libyaml-dev \
            libjson-c-dev libibverbs-dev librdmacm-dev attr iproute2 util-linux \
            perl procps python3 python3-prometheus-client python3-xxhash \
            python3-msgpack python3-numpy python3-pytest python3-pip python3-setuptools \
            python3-dev libsodium-dev clang
LIBS_PC  := fuse3 json-c yaml-0.1 libxxhash libsodium
# What `make check` needs besides: torch (its CPU build), whose tensors the
# Python connector takes and gives, and rsync, which README says works;
# nothing omnifs runs needs them.
TEST_PKGS := python3-torch rsync

CC       ?= cc
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -DFUSE_USE_VERSION=312 \
            -DOMNI_VERSION='"$(VERSION)"' -DOMNI_BINDIR='"$(PREFIX)/bin"' \
            -MMD -MP $(shell pkg-config --cflags $(LIBS_PC) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(LIBS_PC) 2>/dev/null) -lrdmacm -libverbs -lpthread
ifneq ($(SAN),)
BUILD    := build-san
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=address,undefined
endif

# CUDA: built against the toolkit's headers where one is installed;
# transport/gpu.c loads the driver at run time, so nothing links CUDA and
# the binary runs on machines with and without a GPU.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
$(BUILD)/obj/transport/gpu.o: CFLAGS += -DOMNI_CUDA -I$(CUDA_HOME)/include
# The XXH3 kernel (transport/gpu_xxh3.cu) where the toolkit has nvcc: its
# PTX, as a C string gpu.c hands the driver, which compiles it for its
# GPU (sm_75, Turing, is the oldest CUDA 13 builds for).
ifneq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
$(BUILD)/obj/transport/gpu.o: CFLAGS += -DOMNI_XXH3_PTX -I$(BUILD)/obj/transport
$(BUILD)/obj/transport/gpu.o: $(BUILD)/obj/transport/gpu_xxh3.ptx.h
$(BUILD)/obj/transport/gpu_xxh3.ptx.h: transport/gpu_xxh3.cu transport/xxh3_block.h
	@mkdir -p $(@D)
	$(CUDA_HOME)/bin/nvcc -ptx -arch=compute_75 -o $(@:.h=) $<
	sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' $(@:.h=) >$@
endif
endif

KV_SRCS  := kvfmt/kvfmt.c kvfmt/vllm.c kvfmt/pyjson.c kvfmt/plan.c kvfmt/convert.c
KV_OBJS  := $(KV_SRCS:%.c=$(BUILD)/obj/%.o)
LIB_SRCS := $(KV_SRCS) transport/pool.c transport/gpu.c transport/xxh3sum.c transport/rdma_probe.c transport/proto.c \
            transport/auth.c transport/xport.c transport/xport_dial.c \
            transport/xport_accept.c transport/xport_pull.c transport/xport_serve.c transport/xport_rdma.c transport/rdma.c transport/rdma_read.c \
            transport/rdma_grant.c fs/cluster.c fs/cluster_serve.c fs/lease.c fs/owedlog.c \
            fs/names.c fs/ended.c fs/htab.c fs/subs.c fs/timerq.c fs/rangeset.c fs/stats.c \
            fs/ns.c fs/ns_io.c fs/ns_wait.c fs/ns_direct.c fs/ns_hash.c fs/ns_remote.c fs/ns_stream.c fs/ns_xattr.c fs/view.c fs/caller.c fs/callwait.c fs/vfile.c fs/loop.c fs/kinit.c fs/ops.c \
            fs/ops_ioctl.c mount/conf.c
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
UNIT     := $(patsubst tests/unit/%.c,$(BUILD)/t/%.t,$(wildcard tests/unit/*.c))
TOOLS    := $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(wildcard tests/tools/*.c))
BENCHES  := $(BUILD)/bench/ceilingfs $(BUILD)/bench/edgefs $(BUILD)/bench/memcpy $(BUILD)/bench/tcpceil \
            $(BUILD)/bench/wake $(BUILD)/bench/hashrate
INTEG    := $(sort $(wildcard tests/integ/*.t))
# The Python module's small requests in C (contrib/python/omnifs/_small.c),
# built beside its sources, where the tests import the package from, for
# Debian's python3; pip builds its own when it installs the package.
PYEXT    := contrib/python/omnifs/_small$(shell /usr/bin/python3 -c \
            'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
PYINC    := $(shell /usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)

.PHONY: all python deps test-deps run check check-clang test check-cuda check-rdma bench fuzz soak tools install uninstall clean
all: $(BUILD)/omnifs $(BUILD)/mount.omnifs $(BUILD)/omnikv

# $(call install_missing,PKGS): apt-get install those of PKGS not installed.
define install_missing
	@missing=$$(for p in $(1); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing" $$missing; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends $$missing; } >/dev/null || { echo "deps: apt-get failed" >&2; exit 1; }; \
	fi
endef

deps:
	$(call install_missing,$(DEB_PKGS))

test-deps:
	$(call install_missing,$(DEB_PKGS) $(TEST_PKGS))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# What the tests and benchmarks import; not part of all, so that the
# daemon builds without Python's headers.  Not with $(CFLAGS): a sanitized
# extension would not load into python3.
python: $(PYEXT)
$(PYEXT): contrib/python/omnifs/_small.c fs/direct.h
	$(CC) -O2 -g -std=c11 -Wall -Wextra -Werror -shared -fPIC -I$(PYINC) -I. $< -o $@

$(BUILD)/omnifs: $(BUILD)/obj/mount/main.o $(BUILD)/obj/mount/mntpoint.o $(LIB_OBJS)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/omnikv: $(BUILD)/obj/mount/omnikv.o $(BUILD)/obj/mount/omnikv_pack.o $(KV_OBJS)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/mount.omnifs: $(BUILD)/obj/mount/mount_omnifs.o
	$(CC) $(LDFLAGS) $^ -o $@

$(BUILD)/t/%.t: $(BUILD)/obj/tests/unit/%.o $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/tools/%: $(BUILD)/obj/tests/tools/%.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -lpthread -o $@

# Tools that speak kvfmt link it.
$(BUILD)/tools/kvgen: $(BUILD)/obj/tests/tools/kvgen.o $(KV_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# ... and the one that speaks the peer protocol links it and the handshake.
$(BUILD)/tools/peerfuzz: $(BUILD)/obj/tests/tools/peerfuzz.o $(BUILD)/obj/transport/proto.o \
		$(BUILD)/obj/transport/auth.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# ... and the stranger that connects a queue pair, the verbs libraries.
$(BUILD)/tools/rdmaconnect: $(BUILD)/obj/tests/tools/rdmaconnect.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -lrdmacm -libverbs -o $@

$(BUILD)/bench/ceilingfs: $(BUILD)/obj/tests/bench/ceilingfs.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/bench/edgefs: $(BUILD)/obj/tests/bench/edgefs.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# The frame decoder's fuzz target: clang's libFuzzer with ASan and UBSan.
FUZZ_SECS ?= 60
CHECK_FUZZ_SECS ?= 20         # make check fuzzes this long
FUZZ_DIR  := build-fuzz
$(FUZZ_DIR)/frame: tests/fuzz/frame.c transport/proto.c transport/proto.h
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/fuzz/frame.c transport/proto.c -o $@
$(FUZZ_DIR)/seeds: tests/fuzz/seeds.c transport/proto.c transport/proto.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -Wall -Wextra -Werror tests/fuzz/seeds.c transport/proto.c -o $@

# kvfmt's parsers: both payload formats, views and conversions.
FUZZ_KV_LIBS := $(shell pkg-config --cflags --libs json-c libxxhash 2>/dev/null)
$(FUZZ_DIR)/kv: tests/fuzz/kv.c $(KV_SRCS) kvfmt/kvfmt.h kvfmt/internal.h
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		tests/fuzz/kv.c $(KV_SRCS) $(FUZZ_KV_LIBS) -o $@
$(FUZZ_DIR)/kvseeds: tests/fuzz/kvseeds.c $(KV_SRCS) kvfmt/kvfmt.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -Wall -Wextra -Werror tests/fuzz/kvseeds.c $(KV_SRCS) $(FUZZ_KV_LIBS) -o $@

# The owed log's reader: the file a crash or a full disk left in state_dir.
OWED_SRCS := tests/fuzz/owed.c fs/owedlog.c transport/proto.c
$(FUZZ_DIR)/owed: $(OWED_SRCS) fs/owedlog.h transport/proto.h
	@mkdir -p $(dir $@)
	clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		$(OWED_SRCS) -lxxhash -o $@
$(FUZZ_DIR)/owedseeds: tests/fuzz/owedseeds.c fs/owedlog.c transport/proto.c fs/owedlog.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -Wall -Wextra -Werror tests/fuzz/owedseeds.c fs/owedlog.c \
		transport/proto.c -lxxhash -o $@

# Runs each fuzz target for FUZZ_SECS seconds from its seeds; a crash, a
# leak or a hang fails it and leaves the input in $(FUZZ_DIR).  Then a peer
# that holds the secret misbehaves as long each way against a live daemon:
# hostile requests to its port, hostile answers to its requests
# (tests/integ/15-peerfuzz.t; under SAN=1 the daemon is sanitized).
fuzz: $(FUZZ_DIR)/frame $(FUZZ_DIR)/seeds $(FUZZ_DIR)/kv $(FUZZ_DIR)/kvseeds \
      $(FUZZ_DIR)/owed $(FUZZ_DIR)/owedseeds $(BUILD)/omnifs $(BUILD)/tools/peerfuzz
	@rm -rf $(FUZZ_DIR)/corpus $(FUZZ_DIR)/kvcorpus $(FUZZ_DIR)/owedcorpus
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/kvcorpus $(FUZZ_DIR)/owedcorpus
	@$(FUZZ_DIR)/seeds $(FUZZ_DIR)/corpus
	@$(FUZZ_DIR)/kvseeds $(FUZZ_DIR)/kvcorpus
	@$(FUZZ_DIR)/owedseeds $(FUZZ_DIR)/owedcorpus
	@cd $(FUZZ_DIR) && ./frame -max_total_time=$(FUZZ_SECS) -max_len=70000 -timeout=5 \
		-print_final_stats=1 corpus 2>fuzz.log || { tail -40 fuzz.log; exit 1; }
	@grep -E '^stat::number_of_executed_units' $(FUZZ_DIR)/fuzz.log | sed 's/^/fuzz: frame decoder: /'
	@cd $(FUZZ_DIR) && ./kv -max_total_time=$(FUZZ_SECS) -max_len=65536 -timeout=5 \
		-print_final_stats=1 kvcorpus 2>kvfuzz.log || { tail -40 kvfuzz.log; exit 1; }
	@grep -E '^stat::number_of_executed_units' $(FUZZ_DIR)/kvfuzz.log | sed 's/^/fuzz: kvfmt parsers: /'
	@cd $(FUZZ_DIR) && ./owed -max_total_time=$(FUZZ_SECS) -max_len=16384 -timeout=5 \
		-print_final_stats=1 owedcorpus 2>owedfuzz.log || { tail -40 owedfuzz.log; exit 1; }
	@grep -E '^stat::number_of_executed_units' $(FUZZ_DIR)/owedfuzz.log | sed 's/^/fuzz: owed log: /'
	@# ... and a live daemon's peer port, by a peer that holds the secret.
	@out=$$(OMNIFS_BUILD=$(abspath $(BUILD)) PEERFUZZ_SECS=$(FUZZ_SECS) \
		tests/integ/15-peerfuzz.t 2>&1) || { echo "$$out"; exit 1; }; \
	echo "$$out" | sed -n 's/^# peerfuzz: /fuzz: peer port: /p'

$(BUILD)/bench/tcpceil: $(BUILD)/obj/tests/bench/tcpceil.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/bench/memcpy: $(BUILD)/obj/tests/bench/memcpy.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -o $@

$(BUILD)/bench/hashrate: $(BUILD)/obj/tests/bench/hashrate.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -lxxhash -o $@

$(BUILD)/bench/wake: $(BUILD)/obj/tests/bench/wake.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) $^ -lpthread -o $@

# Targets that install packages first build in a new make: the flags from
# pkg-config are read when a Makefile is parsed, before deps has run.
run: deps
	@$(MAKE) --no-print-directory all
	@mkdir -p omni
	@echo "omnifs: mounting a single node at ./omni; in another shell try:"
	@echo "  echo hi > omni/0/1/k && cat omni/0/1/k; cat omni/.omni/stats   (Ctrl-C unmounts)"
	$(BUILD)/omnifs -f omni

test: all python $(UNIT) $(TOOLS) $(BENCHES)
	OMNIFS_BUILD=$(abspath $(BUILD)) prove --exec '' $(PROVE_FLAGS) $(UNIT) $(INTEG)

# The RDMA suite runs in a soft-RoCE guest (../shared/rdma-vm), one boot for
# all of tests/rdma/*.t; where no guest can be had it says SKIP and why.
check-rdma: all python $(TOOLS)
	tests/rdma/suite $(abspath $(BUILD))

# The GPU suite (tests/cuda/*.t) needs a CUDA device; elsewhere each file
# says SKIP and why.  On a GPU machine: make check-cuda.
check-cuda: all python $(TOOLS)
	OMNIFS_BUILD=$(abspath $(BUILD)) prove --exec '' $(PROVE_FLAGS) $(sort $(wildcard tests/cuda/*.t))

# Every C file through clang too, warnings as errors: what gcc lets pass
# (a struct initialized in part by position) must not break a build with
# the other compiler Debian ships.  Built only; the tests run gcc's.
check-clang:
	@$(MAKE) --no-print-directory CC=clang SAN= BUILD=build-clang all $(subst $(BUILD)/,build-clang/,$(UNIT) $(TOOLS) $(BENCHES))
	@echo "check-clang: everything builds with clang, no warnings"

check: test-deps
	@$(MAKE) --no-print-directory check-clang
	@$(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory check-cuda
	@$(MAKE) --no-print-directory check-rdma
	@$(MAKE) --no-print-directory fuzz FUZZ_SECS=$(CHECK_FUZZ_SECS)

# The long form of tests/integ/21-chaos.t, for a person before a release:
# SOAK_SECS of faults under writers and readers, the daemons sanitized,
# with the fuzzers beside, one after the other, in the same time: `make
# fuzz` runs five for FUZZ_SECS each (three decoders, then 15-peerfuzz.t's
# two, requests and answers), so a fifth each; a third made it 5/3 as long.
SOAK_SECS ?= 1800
soak: deps
	@$(MAKE) --no-print-directory SAN=1 all tools
	@echo "soak: $(SOAK_SECS) s of chaos, the fuzzers beside it"
	@$(MAKE) --no-print-directory fuzz SAN=1 FUZZ_SECS=$$(( $(SOAK_SECS) / 5 )) \
		>build-san/soak-fuzz.log 2>&1 & \
	fz=$$!; \
	OMNIFS_BUILD=$(abspath build-san) CHAOS_SECS=$(SOAK_SECS) prove -v tests/integ/21-chaos.t; \
	rc=$$?; wait $$fz || rc=1; cat build-san/soak-fuzz.log; exit $$rc

tools: $(TOOLS)

bench: deps
	@$(MAKE) --no-print-directory all python $(TOOLS) $(BENCHES)
	OMNIFS_BUILD=$(abspath $(BUILD)) tests/bench/bench.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)/sbin
	install -m 755 $(BUILD)/omnifs $(DESTDIR)$(PREFIX)/bin/omnifs
	install -m 755 $(BUILD)/omnikv $(DESTDIR)$(PREFIX)/bin/omnikv
	install -m 755 $(BUILD)/mount.omnifs $(DESTDIR)$(PREFIX)/sbin/mount.omnifs
	ln -sf $(PREFIX)/sbin/mount.omnifs $(DESTDIR)/sbin/mount.fuse.omnifs
	install -d $(DESTDIR)/etc/omnifs
	[ -e $(DESTDIR)/etc/omnifs/omnifs.yaml ] || \
		install -m 644 contrib/omnifs.yaml $(DESTDIR)/etc/omnifs/omnifs.yaml
	@# the Python package, for Debian's python3 (README, "vllm-omni")
	/usr/bin/python3 -m pip install -q --no-deps --no-build-isolation --no-warn-script-location \
		--break-system-packages --root-user-action=ignore --root $(if $(DESTDIR),$(DESTDIR),/) \
		./contrib/python
	rm -rf contrib/python/build contrib/python/omnifs.egg-info

uninstall:
	-/usr/bin/python3 -m pip uninstall -q -y --break-system-packages omnifs
	rm -f $(DESTDIR)$(PREFIX)/bin/omnifs $(DESTDIR)$(PREFIX)/bin/omnikv \
	      $(DESTDIR)$(PREFIX)/sbin/mount.omnifs \
	      $(DESTDIR)/sbin/mount.fuse.omnifs

clean:
	rm -rf build build-san build-fuzz build-clang
	rm -f $(PYEXT)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
.SECONDARY:
