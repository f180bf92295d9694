# gvx — containerd shim + gVisor sandboxes for RL rollouts.
#   make build     build the shim, gvx-sentry and the gvx CLI into _output/bin
#   make demo      an RL episode through the Go SDK: docker inside a gVisor sandbox
#   make test      unit + integration tests against a real containerd
#   make bench     benchmarks against runsc (via containerd's runc shim) and runc
#   make critest   critest (CRI conformance) against gvx and runc: docs/compatibility.md
#   make fuzz      every fuzz target until it had FUZZCPU of CPU (default 10m, one worker each; FUZZJOBS=2 two at a time)
#   make install   PREFIX=/usr/local
#   make installer-image   the node installer's image (deploy/, docs/kubernetes.md)
SHELL := /bin/bash
GO ?= go
PREFIX ?= /usr/local
OUT := $(CURDIR)/_output
BIN := $(OUT)/bin

# Pinned tools, built from the Go module proxy into a cache keyed by version.
CACHE ?= $(HOME)/.cache/gvx
CONTAINERD_VERSION := v2.4.2
NERDCTL_VERSION := v2.1.3
GVISOR_VERSION := $(shell awk '{for(i=1;i<NF;i++) if($$i=="gvisor.dev/gvisor") {print $$(i+1); exit}}' sentry/go.mod)
# What gvx-sentry reports as gVisor's version: gVisor's save records it and
# a restore refuses a state file saved by another (the state's layout is
# gVisor's types as this Go compiles them). Unset, every build says
# VERSION_MISSING and a restore would load another build's state.
SENTRY_VERSION := gvx-gvisor-$(GVISOR_VERSION)-$(shell $(GO) env GOVERSION)
SENTRY_LDFLAGS := -X gvisor.dev/gvisor/runsc/version.version=$(SENTRY_VERSION)
CONTAINERD_BIN := $(CACHE)/tools/containerd-$(CONTAINERD_VERSION)/bin
CRICTL_VERSION := v1.34.0
CRICTL_BIN := $(CACHE)/tools/crictl-$(CRICTL_VERSION)/bin
CRITEST_VERSION := v1.34.0
CRITEST_BIN := $(CACHE)/tools/critest-$(CRITEST_VERSION)/bin
CRANE_VERSION := v0.22.1
CRANE_BIN := $(CACHE)/tools/crane-$(CRANE_VERSION)/bin
NERDCTL_BIN := $(CACHE)/tools/nerdctl-$(NERDCTL_VERSION)/bin
RUNSC_BIN := $(CACHE)/tools/runsc-$(GVISOR_VERSION)/bin
IMAGES := $(OUT)/images

export CGO_ENABLED := 0

.PHONY: all build shim sentry cli deps tools images demo demo-bin test unit integration bench critest install installer-image clean lint fuzz

all: build

build: shim sentry cli

# gvx-relay is built reproducibly (no build path, no VCS stamp): sandboxes
# mount it by its sha256 and checkpoints keep it (shim/relaybin.go), so a
# commit or checkout that does not change its code keeps the same build.
RELAY_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -o $(BIN)/gvx-relay ./cmd/gvx-relay

shim:
	$(GO) build -o $(BIN)/ ./cmd/containerd-shim-gvx-v2 ./cmd/gvx-shim
	$(RELAY_BUILD)

cli:
	$(GO) build -o $(BIN)/gvx ./cmd/gvx

sentry:
	cd sentry && $(GO) build -ldflags "$(SENTRY_LDFLAGS)" -o $(BIN)/ ./cmd/gvx-sentry ./cmd/gvx-hook ./cmd/gvx-pause ./cmd/gvx-runtime ./cmd/gvx-nat

deps:
	@hack/deps.sh

tools: $(CONTAINERD_BIN)/containerd $(NERDCTL_BIN)/nerdctl $(RUNSC_BIN)/runsc $(CRICTL_BIN)/crictl $(CRITEST_BIN)/critest $(CRANE_BIN)/crane

# critest's cmd/critest holds only test files: it is built with go test -c,
# in the module cache's copy of cri-tools (its own go.mod and go.sum).
$(CRITEST_BIN)/critest:
	@echo "tools: building critest $(CRITEST_VERSION) (go test -c, a few minutes, once)"
	@mkdir -p $(CRITEST_BIN)
	cd /tmp && dir=$$($(GO) mod download -json sigs.k8s.io/cri-tools@$(CRITEST_VERSION) | awk -F'"' '$$2 == "Dir" {print $$4}') && \
		test -n "$$dir" && cd "$$dir" && $(GO) test -c -o $@.tmp \
		-ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$(CRITEST_VERSION)" ./cmd/critest
	mv $@.tmp $@

# crane: critest's loopback registry (crane registry serve) and the
# pushes of hack/mkimage-critest.sh.
$(CRANE_BIN)/crane:
	@echo "tools: building crane $(CRANE_VERSION)"
	cd /tmp && GOBIN=$(CRANE_BIN) $(GO) install github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)

$(CRICTL_BIN)/crictl:
	@echo "tools: building crictl $(CRICTL_VERSION)"
	cd /tmp && GOBIN=$(CRICTL_BIN) $(GO) install sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION)

$(CONTAINERD_BIN)/containerd:
	@echo "tools: building containerd, ctr, containerd-shim-runc-v2 $(CONTAINERD_VERSION) (a few minutes, once)"
	@mkdir -p $(CONTAINERD_BIN).tmp
	cd /tmp && CGO_ENABLED=1 GOBIN=$(CONTAINERD_BIN).tmp $(GO) install \
		github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/ctr@$(CONTAINERD_VERSION)
	cd /tmp && GOBIN=$(CONTAINERD_BIN).tmp $(GO) install github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION)
	rm -rf $(CONTAINERD_BIN) && mv $(CONTAINERD_BIN).tmp $(CONTAINERD_BIN)

$(NERDCTL_BIN)/nerdctl:
	@echo "tools: building nerdctl $(NERDCTL_VERSION) (a few minutes, once)"
	cd hack/tools/nerdctl && $(GO) build -o $@.tmp github.com/containerd/nerdctl/v2/cmd/nerdctl && mv $@.tmp $@

$(RUNSC_BIN)/runsc:
	@echo "tools: building runsc $(GVISOR_VERSION) (the peer for benchmarks)"
	cd sentry && $(GO) build -o $@.tmp gvisor.dev/gvisor/runsc && mv $@.tmp $@

images: $(IMAGES)/busybox.tar $(IMAGES)/pause.tar $(IMAGES)/dind.tar $(IMAGES)/e2b-base.tar $(IMAGES)/swebench.tar

$(IMAGES)/busybox.tar: hack/mkimage-busybox.sh hack/oci-archive.sh
	hack/mkimage-busybox.sh $@

# A pod sandbox ("pause") image for CRI tests: busybox sleeping forever.
$(IMAGES)/pause.tar: hack/mkimage-busybox.sh hack/oci-archive.sh
	hack/mkimage-busybox.sh $@ gvx.test/pause:latest '["sleep","2147483647"]'

# The dind image (debootstrap + Debian's docker.io) takes a minute or two to
# build; it is cached by the hash of what goes into it.
DIND_HASH := $(shell cat hack/mkimage-dind.sh hack/oci-archive.sh hack/dind/* | sha256sum | cut -c1-16)
DIND_CACHED := $(CACHE)/images/dind-$(DIND_HASH).tar

$(DIND_CACHED):
	@echo "images: building the dind image (debootstrap bookworm + docker.io, once per content hash)"
	hack/mkimage-dind.sh $@

$(IMAGES)/dind.tar: $(DIND_CACHED)
	@mkdir -p $(IMAGES)
	ln -f $< $@ 2>/dev/null || cp $< $@

# gvx serve's template images (E2B's base: bash, coreutils, user 1000), and
# the swebench example's (python3, patch, its repository), cached by recipe.
E2B_HASH := $(shell cat hack/mkimage-e2b.sh hack/oci-archive.sh | sha256sum | cut -c1-16)
SWE_HASH := $(shell cat hack/mkimage-e2b.sh hack/oci-archive.sh $$(find examples/swebench/image -type f | sort) | sha256sum | cut -c1-16)

$(CACHE)/images/e2b-base-$(E2B_HASH).tar:
	hack/mkimage-e2b.sh $@ gvx.test/e2b-base:latest

$(CACHE)/images/swebench-$(SWE_HASH).tar:
	hack/mkimage-e2b.sh $@ gvx.test/swebench:latest "python3 patch" examples/swebench/image

$(IMAGES)/e2b-base.tar: $(CACHE)/images/e2b-base-$(E2B_HASH).tar
	@mkdir -p $(IMAGES)
	ln -f $< $@ 2>/dev/null || cp $< $@

$(IMAGES)/swebench.tar: $(CACHE)/images/swebench-$(SWE_HASH).tar
	@mkdir -p $(IMAGES)
	ln -f $< $@ 2>/dev/null || cp $< $@

# The demo builds only what it uses — gvx's binaries (the gvx CLI serves
# the embedded containerd), the example program, the busybox and dind
# images — with the image builds beside the Go builds.
demo: deps
	@$(MAKE) --no-print-directory -j3 sentry demo-bin $(IMAGES)/busybox.tar $(IMAGES)/dind.tar
	GVX_BIN=$(BIN) IMAGES=$(IMAGES) CACHE=$(CACHE) hack/demo.sh

# The shim, the CLI and the example in one go build: the containerd
# packages they share compile once.
demo-bin:
	$(GO) build -o $(BIN)/ ./cmd/containerd-shim-gvx-v2 ./cmd/gvx-shim ./cmd/gvx ./examples/episode
	$(RELAY_BUILD)

unit:
	cd api && $(GO) test ./...
	$(GO) test ./...
	cd clients/python && python3 -m unittest discover -s tests
	cd sentry && $(GO) test ./launcher/... ./hook/... ./netns/... ./podnet/... ./podjoin/... ./ctlclient/... ./volmount/... ./hostbind/... ./subcontainer/... ./argv/... ./fastexec/... ./sandboxctl/... ./compat/... ./maskpaths/... ./sysclass/... ./oomwatch/... ./exectask/... ./monitor/... ./hostcreds/... ./cmd/gvx-runtime/... ./cmd/gvx-sentry/... ./cmd/gvx-pause/... ./checkpoint/... ./nat/... ./natproc/... ./natsandbox/... ./prefilter/...

# make integration RUN=REGEX runs only the integration tests REGEX names.
integration: deps build tools images
	rm -rf $(OUT)/containerd-logs
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) NERDCTL_BIN=$(NERDCTL_BIN) RUNSC_BIN=$(RUNSC_BIN) CRICTL_BIN=$(CRICTL_BIN) IMAGES=$(IMAGES) \
		CRITEST_BIN=$(CRITEST_BIN) CRANE_BIN=$(CRANE_BIN) GVX_TEST_LOG_DIR=$(OUT)/containerd-logs \
		$(GO) test -count=1 -timeout 75m -v $(if $(RUN),-run '$(RUN)') ./integration/ 2>&1 | tee $(OUT)/integration.log | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; \
		rc=$${PIPESTATUS[0]}; hack/testtimes.sh $(OUT)/integration.log; exit $$rc
	# The SDK's godoc examples, on real sandboxes.
	GVX_BIN=$(BIN) IMAGES=$(IMAGES) $(GO) test -count=1 -run Example .

test: lint unit integration

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	cd api && $(GO) vet ./...
	$(GO) vet ./...
	cd sentry && $(GO) vet ./launcher/... ./hook/... ./netns/... ./podnet/... ./podjoin/... ./ctlclient/... ./volmount/... ./hostbind/... ./subcontainer/... ./bundle/... ./argv/... ./fastexec/... ./sandboxctl/... ./compat/... ./maskpaths/... ./sysclass/... ./oomwatch/... ./exectask/... ./monitor/... ./hostcreds/... ./internal/... ./checkpoint/... ./nat/... ./natproc/... ./natsandbox/... ./prefilter/... ./cmd/...

# The fuzz targets' seed corpora (testdata/fuzz/) run in make unit; this
# fuzzes each target until it has had FUZZCPU of CPU, in rounds of
# FUZZROUND (FUZZTIME=<duration>: one round of that wall time instead;
# FUZZ=regexp picks targets; FUZZJOBS targets at a time, one worker each).
FUZZCPU ?= 10m
FUZZROUND ?= 2m
FUZZTIME ?=
FUZZJOBS ?= 1
fuzz:
	FUZZCPU=$(FUZZCPU) FUZZROUND=$(FUZZROUND) FUZZTIME=$(FUZZTIME) FUZZJOBS=$(FUZZJOBS) hack/fuzz.sh

bench: deps build tools images
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) RUNSC_BIN=$(RUNSC_BIN) IMAGES=$(IMAGES) \
		$(GO) run ./bench/create $(BENCHFLAGS)
	$(GO) run ./bench/volume $(VOLBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/snapshotter $(SNAPBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/docker $(DOCKERBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) RUNSC_BIN=$(RUNSC_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/checkpoint $(CKBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/serve $(SERVEBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) RUNSC_BIN=$(RUNSC_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/nat $(NATBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) RUNSC_BIN=$(RUNSC_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/churn $(CHURNBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) RUNSC_BIN=$(RUNSC_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/cripod $(CRIPODBENCHFLAGS)
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) IMAGES=$(IMAGES) $(GO) run ./bench/soak $(SOAKBENCHFLAGS)

# critest v1.34 against the gvx and runc handlers of one private containerd
# (integration/critest; ~15 minutes): the table goes to docs/compatibility.md,
# the specs gvx passes to integration/testdata/critest-floor.txt.
# CRITESTFLAGS="-focus REGEXP" runs some specs and writes nothing.
critest: deps build tools
	GVX_BIN=$(BIN) CONTAINERD_BIN=$(CONTAINERD_BIN) CRITEST_BIN=$(CRITEST_BIN) CRANE_BIN=$(CRANE_BIN) \
		CRITEST_VERSION=$(CRITEST_VERSION) CONTAINERD_VERSION=$(CONTAINERD_VERSION) \
		$(GO) run ./integration/critest/cmd/gvx-critest $(CRITESTFLAGS)

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/containerd-shim-gvx-v2 $(BIN)/gvx-shim $(BIN)/gvx-sentry $(BIN)/gvx-hook $(BIN)/gvx-pause $(BIN)/gvx-relay $(BIN)/gvx-runtime $(BIN)/gvx-nat $(BIN)/gvx $(DESTDIR)$(PREFIX)/bin/

# The image deploy/base's DaemonSet runs: busybox, gvx's binaries and
# deploy/installer/install.sh, built locally (no registry, no base image).
INSTALLER_IMAGE ?= gvx.test/gvx-installer:latest
installer-image: build
	hack/mkimage-installer.sh $(OUT)/gvx-installer.tar $(INSTALLER_IMAGE) $(BIN)

clean:
	rm -rf $(OUT)
