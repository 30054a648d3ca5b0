# terra — build, install, test, lint, bench, fuzz.
# `make build` produces a static x86_64-unknown-linux-musl binary at dist/terra.

PREFIX ?= /usr/local
TARGET ?= x86_64-unknown-linux-musl
CARGO ?= cargo
RELEASE_BIN := target/$(TARGET)/release/terra
FUZZ_SECONDS ?= 60

# Targets terra must check and lint on, from this Linux machine (no linking:
# clippy only type-checks). The Apple targets check every target, tests
# included; Windows the libraries and the binary (its backend is not built yet).
APPLE_TARGETS := aarch64-apple-darwin x86_64-apple-darwin
WINDOWS_TARGETS := x86_64-pc-windows-gnu x86_64-pc-windows-msvc

.PHONY: all build install test lint lint-cross bench fuzz demo clean

all: build

# Installs the rustup target on first use, then builds the static binary.
build:
	@rustup target list --installed 2>/dev/null | grep -qx '$(TARGET)' || rustup target add $(TARGET)
	$(CARGO) build --release --locked --target $(TARGET) --bin terra
	@mkdir -p dist
	cp $(RELEASE_BIN) dist/terra.tmp && mv dist/terra.tmp dist/terra
	@file dist/terra 2>/dev/null || true

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 dist/terra $(DESTDIR)$(PREFIX)/bin/terra

# The README's test command. Enforcement tests run each probe as the calling
# user and, when that is root, again as uid/gid 65534 through setpriv. Tests
# that need root are #[ignore = "needs root: ..."]: as root they run too
# (--include-ignored); otherwise cargo lists them as ignored.
test:
	@if [ "$$(id -u)" = 0 ]; then set -- --include-ignored; else echo "make test: not root: the tests that need root stay ignored"; fi; \
	echo "$(CARGO) test --workspace --locked -- $$*"; \
	$(CARGO) test --workspace --locked -- "$$@"

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(MAKE) lint-cross

# Installs a missing rustup target first (as `make build` does).
lint-cross:
	@for t in $(APPLE_TARGETS) $(WINDOWS_TARGETS); do \
	  rustup target list --installed 2>/dev/null | grep -qx "$$t" || rustup target add "$$t" || exit 1; \
	done
	@for t in $(APPLE_TARGETS); do \
	  echo "$(CARGO) clippy --workspace --all-targets --locked --target $$t -- -D warnings"; \
	  $(CARGO) clippy --workspace --all-targets --locked --target $$t -- -D warnings || exit 1; \
	done
	@for t in $(WINDOWS_TARGETS); do \
	  echo "$(CARGO) clippy --workspace --locked --target $$t -- -D warnings"; \
	  $(CARGO) clippy --workspace --locked --target $$t -- -D warnings || exit 1; \
	done

# Benchmarks print medians; docs/performance.md records them with the machine.
bench: build
	$(CARGO) bench --locked -p terra-policy
	TERRA_BIN=dist/terra scripts/bench-run.sh
	TERRA_BIN=dist/terra scripts/bench-net.sh

# Bounded-time fuzzing of the parsers (FUZZ_SECONDS per target).
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

# terra's main job, on the static build: run a command in the default box.
demo: build
	dist/terra run -- sh -c 'echo "inside terra as $$(id -u) in $$(pwd)"; ls /; cat /etc/passwd'

clean:
	$(CARGO) clean
	rm -rf dist
