# replywire — every target installs what it needs through `setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COMPILED := .compiled/manifest.json
PROTO := protos/shared/pb/replywire.proto
GENERATED := shared/pb/replywire_pb2.py shared/pb/replywire_pb2.pyi \
             shared/pb/replywire_pb2_grpc.py shared/pb/replywire_pb2_grpc.pyi

PORT ?= 50051
TARGET ?= 127.0.0.1:$(PORT)
CASE ?= replace-file
ARGS ?=

.PHONY: setup protos check test coverage test-pure ts lint fuzz bench demo trace run-producer run-consumer \
        lock clean conformance vectors

setup: $(STAMP) $(GENERATED) $(COMPILED)

# Re-install only when the dependency pins change. Then the benchmark's own pins
# (bench/requirements.txt: the SSE stack bench.paced compares with), never the product's,
# constrained by the product's lock where the two share a package.
$(STAMP): pyproject.toml requirements.lock bench/requirements.txt
	@echo "setup: creating $(VENV) and installing the pinned dependencies" >&2
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]' >&2
	@$(PY) -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt \
	    -c requirements.lock >&2
	@touch $@

# Generated protobuf code is not committed: it is generated here, from the .proto, by the
# pinned grpcio-tools, with .pyi stubs from mypy-protobuf (protos/generate.py, which a build
# of the distribution runs as well, and which says why it renames an import).
$(GENERATED) &: $(PROTO) protos/generate.py $(STAMP)
	@echo "setup: generating shared/pb/ from $(PROTO)" >&2
	@$(PY) protos/generate.py . >&2
	@touch $(GENERATED)

# The hot modules compiled by mypyc into .compiled/ (native/: which ones, and how the
# packages import them), when a C compiler and Python's headers are here; without them, or
# with REPLYWIRE_PURE=1, native.build says so, writes no manifest, and the pure build runs.
# Again when a source of shared/, runtime/ or native/ is newer than the build's manifest;
# native.build compiles only if the hot modules' sources changed (their SHA-256).
$(COMPILED): $(STAMP) $(GENERATED) $(wildcard shared/*.py shared/wire/*.py runtime/*.py native/*.py)
	@$(PY) -m replywire.native.build
	@if [ -f $@ ]; then touch $@; fi

protos: $(STAMP)
	rm -f $(GENERATED)
	$(MAKE) --no-print-directory $(GENERATED)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The tests run on pytest-xdist workers, but those marked serial (tests/conftest.py says
# which and why), which run alone, in one process, first. Most tests wait (on processes,
# sockets, leases, graces) more than they compute, so more workers than cores pay: 4 on 2.
# worksteal: a worker that is done takes tests queued for another.
WORKERS ?= 4
PARALLEL := -n $(WORKERS) --dist worksteal

# The quick loop, before every commit, with no server started: the linters and mypy, then
# tests/unit but the tests marked slow (the property and linearity checks, which make test
# runs): well under a minute.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "serial and not slow" tests/unit
	$(PY) -m pytest -q $(PARALLEL) -m "not serial and not slow" tests/unit

# Everything, on the build make setup made (compiled where a compiler is): first the tests
# marked serial, alone (make protos rewrites shared/pb/, which any process started meanwhile
# would import), then the rest in parallel. CI (.ci/run) then runs test-pure: tests/unit and
# tests/integration again on the pure build (REPLYWIRE_PURE=1), the same behaviour from the
# same source, compiled or not.
#
# make coverage is both, measured: coverage covers the three passes (--cov-append) and the
# producer and consumer processes the tests start (coverage's subprocess patch), but those
# of the tests marked no_cover: loads (the benchmarks, every vector through each consumer,
# the core's mutants, 3,000 streams) through code the other tests measure. The compiled
# modules' lines are measured in the pure pass. The table lists the files not fully
# covered. Tracing costs a fifth of the time, so make test leaves it out.
COVERAGE ?=
test: setup lint
	$(PY) -m pytest -m serial $(if $(COVERAGE),--cov --cov-report=)
	$(PY) -m pytest $(PARALLEL) -m "not serial" $(if $(COVERAGE),--cov --cov-append --cov-report=)

coverage:
	$(MAKE) --no-print-directory test COVERAGE=1
	$(MAKE) --no-print-directory test-pure PURE_COV="--cov --cov-append --cov-report=term"

# tests/unit and tests/integration on the pure-Python build. Under make coverage it adds to
# the coverage of the passes above (the compiled modules' lines are measured here), prints it.
PURE_COV ?=
test-pure: setup
	REPLYWIRE_PURE=1 $(PY) -m pytest -q $(PARALLEL) -m "not serial" $(PURE_COV) \
	    tests/unit tests/integration

# The TypeScript consumer (clients/typescript/; Node 18 or later, and npm): its pinned packages from the
# committed package-lock.json, the strict build (tsc), its node:test tests (which compile src/
# and test/ again, into dist-test/). make test runs the same steps, bounded and reported with
# the other failures, in tests/system/test_typescript.py.
TS := clients/typescript
ts: setup
	cd $(TS) && npm ci
	cd $(TS) && npm run build
	cd $(TS) && npm test
	@touch $(TS_BUILT)

# The TypeScript consumer's build alone (what make conformance runs), again when its sources or
# its pins change.
TS_BUILT := $(TS)/dist/.built
$(TS_BUILT): $(TS)/package-lock.json $(TS)/tsconfig.json $(shell find $(TS)/src -name '*.ts')
	cd $(TS) && npm ci
	cd $(TS) && npm run build
	@touch $@

# The producer's request parsing under 100,000 fuzzed inputs (make test runs a few hundred).
fuzz: setup
	REPLYWIRE_FUZZ_EXAMPLES=100000 $(PY) -m pytest -q tests/system/test_fuzz.py

# Every benchmark side by side into bench/results.md and bench/results.json (full: ~25 min on
# 2 cores). BENCH_SIZE=tiny runs each once in seconds (make test does, in tests/system/test_bench.py).
BENCH_SIZE ?= full
BENCH_OUT ?= bench
bench: setup
	BENCH_SIZE=$(BENCH_SIZE) $(PY) -m bench --out $(BENCH_OUT)

# The conformance kit (docs/conformance.md): every vector against a consumer, in the core mode
# (CONSUMER: a command speaking the line protocol) and the wire mode (CONSUMER_CLI: a consumer
# CLI's command template, its {placeholders} filled in per vector, against the producer's
# --conformance mode). With neither given, both modes run against both consumers, the Python
# one and the TypeScript one (built first). Given on the command line, one of them alone runs
# its own mode only, against that consumer: make conformance CONSUMER="node my-testee.js".
PY_CONSUMER := $(PY) -m conformance.testee
PY_CONSUMER_CLI := $(PY) -m consumer stream --target {target} --case {case_id} \
    --binding {binding_file} --wire {wire} --stream-id {stream_id} --result {result_file} \
    --resume-attempts 0 --no-view --log-level warning {limit_flags}
TS_CONSUMER := node $(TS)/dist/testee.js
TS_CONSUMER_CLI := node $(TS)/dist/cli.js stream --target {target} --case {case_id} \
    --binding {binding_file} --wire {wire} --stream-id {stream_id} --result {result_file} \
    --resume-attempts 0 {limit_flags}
CONFORMANCE_ARGS ?=
RUN_KIT := $(PY) -m conformance run
ifeq ($(origin CONSUMER)/$(origin CONSUMER_CLI),undefined/undefined)
conformance: setup $(TS_BUILT)
	@echo "conformance: the Python consumer"
	$(RUN_KIT) --core "$(PY_CONSUMER)" --wire '$(PY_CONSUMER_CLI)' $(CONFORMANCE_ARGS)
	@echo "conformance: the TypeScript consumer"
	$(RUN_KIT) --core "$(TS_CONSUMER)" --wire '$(TS_CONSUMER_CLI)' $(CONFORMANCE_ARGS)
else
conformance: setup
	$(RUN_KIT) $(if $(CONSUMER),--core "$(CONSUMER)") $(if $(CONSUMER_CLI),--wire '$(CONSUMER_CLI)') \
	    $(CONFORMANCE_ARGS)
endif

# The vectors again, from the recording, the fault catalogue and the crafted wires, each with
# the Python core's verdict: after a change of the core, this one command.
vectors: setup
	$(PY) -m conformance generate

demo: setup
	@$(PY) -m replywire demo

# One stream's timeline from both traces: make trace P=producer.jsonl C=consumer.jsonl
# [STREAM=id] [OUT=timeline.html]  (without STREAM: the streams found)
trace: setup
	@$(PY) -m replywire trace $(P) $(C) $(if $(STREAM),--stream $(STREAM)) $(if $(OUT),--out $(OUT))

# Terminal 1: make run-producer [PORT=50051] [ARGS="--allow-faults"]
run-producer: setup
	@$(PY) -m producer --port $(PORT) $(ARGS)

# Terminal 2: make run-consumer CASE=replace-file [TARGET=127.0.0.1:50051] [ARGS="--wire ndjson"]
# (make turns a non-zero exit into its own 2 and a `make: *** ... Error N` line, N the consumer's
# code: docs/consumer.md#exit-codes-every-consumer-command; the exact code: `.venv/bin/python -m consumer`.)
run-consumer: setup
	@$(PY) -m consumer stream --case $(CASE) --target $(TARGET) $(ARGS)

# Refresh requirements.lock from a clean resolve of pyproject.toml.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
	(echo '# The exact versions `make setup` installs (pip constraints file).'; \
	 echo '# Regenerate after changing pyproject.toml: make lock'; \
	 .lock-venv/bin/pip freeze --all --exclude-editable | grep -v '^pip==') > requirements.lock
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) $(GENERATED) .compiled .mypy_cache .ruff_cache .pytest_cache .hypothesis
	rm -rf $(TS)/node_modules $(TS)/dist $(TS)/dist-test
	rm -rf build dist replywire.egg-info
