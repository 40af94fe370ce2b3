# Two entry points on a fresh machine: `make demo` and `make test`.
# Each bootstraps a local .venv (pinned versions from pyproject.toml) first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
# Packages go in with uv (Astral's installer, pinned, put in the venv by pip): it fetches in
# parallel and installs from its own cache (~/.cache/uv), so the demo's 480 MB of wheels take
# about 8 s cold and 5 s warm, against pip's 38 s here. uv reads no pip.conf: a private
# index is UV_INDEX_URL (or UV_DEFAULT_INDEX), a company CA is UV_NATIVE_TLS=1.
UV := $(BIN)/uv
# constraints.txt pins the dependencies' dependencies too (make lock rewrites it).
INSTALL := $(UV) pip install --quiet --python $(BIN)/python --constraint constraints.txt
ALL_EXTRAS := dev docs local webrtc telephony otel plot simulate asgi mcp audio filters ray

.PHONY: lock demo docs test test-container release-check lint typecheck pytest chromium sip-tools turn-tools node js js-test react react-test protocol-types bench bench-conversation stress test-scale clean

# The demo's own install: the offline voice stack and WebRTC, nothing else (no test or
# lint tools), so a fresh clone reaches its first page quickly.
$(UV):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==0.13.9

$(DEMO_STAMP): pyproject.toml constraints.txt $(UV)
	$(INSTALL) -e '.[local,webrtc]'
	# silero-vad's wheel carries the VAD model; its torch dependency is not needed.
	# pipecat-ai's wheel carries the Smart Turn model (local.SmartTurn); only the file is used.
	$(INSTALL) --no-deps silero-vad==6.2.3 pipecat-ai==1.14.0
	touch $(DEMO_STAMP)

# Everything the tests, the linters and the benchmarks use, on top of the demo's install.
$(STAMP): $(DEMO_STAMP)
	$(INSTALL) -e '.[dev,docs,local,webrtc,telephony,otel,plot,simulate,asgi,mcp,audio,filters]'
	# pyrnnoise's wheel carries RNNoise's library and model; its CLI's dependencies are not needed.
	$(INSTALL) --no-deps pyrnnoise==0.4.5
	touch $(STAMP)

# The offline voice demo in the browser (Silero VAD, Whisper tiny.en, the rule-based demo
# LLM, Piper): `make demo LLM=gpt-4o-mini` (and BASE_URL=... for Ollama, vLLM...) uses a
# real model through an OpenAI-compatible API, `LLM=anthropic/claude-sonnet-4-5` Claude;
# ARGS=... go to `rejoinder dev`, which says how long this took to the first page.
demo: export REJOINDER_DEMO_STARTED_AT := $(shell date +%s.%N)
demo: $(DEMO_STAMP) js
	@echo "rejoinder voice demo: open the URL below, allow the microphone, and talk."
	@echo "For the text console instead: $(BIN)/rejoinder console"
	@$(if $(LLM),REJOINDER_LLM='$(LLM)') $(if $(BASE_URL),OPENAI_BASE_URL='$(BASE_URL)') \
		$(BIN)/rejoinder dev examples/voice_agent.py $(ARGS)

test: lint typecheck docs js-test react-test pytest

# The documentation site (mkdocs.yml): the guides in docs/ and the API reference from the
# docstrings, into site/ (git-ignored); browse it with `.venv/bin/mkdocs serve`. --strict
# fails on any warning: a broken link or anchor, a page missing from the nav, a docstring
# griffe cannot read (not -q: it silences the warnings --strict counts). make test builds
# it too, in tests/docs/test_site.py, with the check that every public name has a docstring.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# A release's two files as PyPI gets them (CI runs this): sdist and wheel from `python -m build`,
# `twine check --strict`, and the page's SDK bundle (made by `make js`, not in git) in the wheel.
release-check: $(STAMP) js
	rm -rf dist
	$(BIN)/python -m build --outdir dist
	$(BIN)/twine check --strict dist/*
	$(BIN)/python -c "import glob, sys, zipfile; [w] = glob.glob('dist/*.whl'); sys.exit(0 if 'rejoinder/io/static/rejoinder-client.js' in zipfile.ZipFile(w).namelist() else 'the wheel lacks the page SDK bundle: run make js')"

# The TypeScript SDK (clients/js): node and npm from Debian when missing, its pinned
# devDependencies from the npm registry (npm ci: exactly package-lock.json), then the
# bundle the page imports, copied next to the page (a generated file, not committed).
JS := clients/js
PAGE_SDK := src/rejoinder/io/static/rejoinder-client.js

node:
	@command -v npm >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q nodejs npm; } \
		|| { echo "node and npm could not be installed"; exit 1; }

$(JS)/node_modules/.installed: $(JS)/package.json $(JS)/package-lock.json | node
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(PAGE_SDK): $(JS)/node_modules/.installed $(wildcard $(JS)/src/*.ts $(JS)/src/*/*.ts) $(JS)/scripts/build.mjs
	cd $(JS) && npm run --silent build
	install -m 644 $(JS)/dist/index.js $(PAGE_SDK)

js: $(PAGE_SDK)

# The SDK's unit tests (node's test runner), and the protocol types checked against a fresh
# generation from the server's models (the JSON Schema, then the TypeScript).
js-test: $(STAMP) js
	cd $(JS) && node --test test/*.test.mjs
	$(BIN)/python -m rejoinder.io.protocol_schema --check
	cd $(JS) && npm run --silent gen:types -- --check

# The React hooks (clients/react) on the SDK, and their example app (the browser test
# serves the built example next to an agent).
REACT := clients/react

$(REACT)/node_modules/.installed: $(REACT)/package.json $(REACT)/package-lock.json | node
	cd $(REACT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(REACT)/dist/index.js: $(REACT)/node_modules/.installed $(PAGE_SDK) $(wildcard $(REACT)/src/*.ts $(REACT)/src/*.tsx) $(REACT)/scripts/build.mjs
	cd $(REACT) && npm run --silent build

$(REACT)/example/dist/app.js: $(REACT)/dist/index.js $(wildcard $(REACT)/example/*.tsx $(REACT)/example/*.html) $(REACT)/example/build.mjs
	cd $(REACT) && npm run --silent build:example

react: $(REACT)/example/dist/app.js

react-test: react
	cd $(REACT) && node --test test/*.test.mjs

# Regenerate the protocol's schema and TypeScript types after changing rejoinder/io/protocol.py.
protocol-types: $(STAMP) $(JS)/node_modules/.installed
	$(BIN)/python -m rejoinder.io.protocol_schema
	cd $(JS) && npm run --silent gen:types

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

# Four workers on two cores: much of the suite waits on real-time sockets, browsers and
# models, so two left the cores idle (tests/conftest.py hands the browser tests to one
# worker, so only one Chromium runs at a time: several starved the pages' 100 ms `played`
# reports; and the longest tests go out first, from the durations the last run kept in
# .pytest_cache). Bytecode is written (PYTHONDONTWRITEBYTECODE unset): without it every
# worker and every subprocess compiled the whole package again. The tests marked `alone`
# (the whole offline stack in real time: a call, a WebSocket conversation, Smart Turn on
# speech) run one at a time, in a run of their own beside the main one, which runs at a
# lower priority (nice 10): beside a worker of equal priority, the models' timing changed
# what they heard, and run after the main run they added 41 s to the suite. Their output
# is printed once both are done. Only their files are collected. The site's strict build
# is `make docs` (before the tests); `site` marks its pytest twin, left out here.
# --durations: the 15 slowest tests of each run are printed, so that CI shows where the
# suite's time goes before it outgrows its budget.
ALONE_TESTS = $(shell grep -rlE "mark\.alone\b" tests --include='test_*.py')
pytest: $(STAMP) chromium sip-tools turn-tools js react
	@alone_log=$$(mktemp); \
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -p no:xdist -p no:cacheprovider -m "alone and not container" --durations=15 --hypothesis-profile=ci $(ALONE_TESTS) >$$alone_log 2>&1 & alone=$$!; \
	echo "pytest: the alone tests run beside this run (their output follows it)"; \
	PYTHONDONTWRITEBYTECODE= nice -n 10 $(BIN)/pytest -n 4 -m "not alone and not container and not site" --durations=15 --hypothesis-profile=ci; main=$$?; \
	wait $$alone; alone_rc=$$?; \
	echo "---- the alone tests (exit $$alone_rc)"; cat $$alone_log; rm -f $$alone_log; \
	test $$main -eq 0 && test $$alone_rc -eq 0

# The container image (tests/deploy, marked container): built and run where Docker or
# Podman works; elsewhere container/check_image.py builds its layout from the Dockerfile
# (a pip install of the offline stack, one to two minutes) and checks it. CI runs it.
test-container: $(STAMP) node
	$(BIN)/pytest -p no:xdist -m container tests/deploy

# The browser tests (tests/io/test_*browser.py) drive Debian's chromium through Playwright
# (Playwright's own browser download is not used); without it they are skipped.
chromium:
	@test -x /usr/bin/chromium || { apt-get update -q && apt-get install -y -q chromium; } \
		|| echo "chromium could not be installed: the browser tests will be skipped"

# The TURN tests (tests/io/test_turn_*.py) relay WebRTC through a real coturn on loopback.
turn-tools:
	@command -v turnserver >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q coturn; } \
		|| echo "coturn could not be installed: the TURN tests will be skipped"

# The SIP tests talk to real SIP software on loopback: SIPp (Debian's sip-tester) for call
# flows and load, baresip for a call with audio both ways.
sip-tools:
	@{ command -v sipp >/dev/null 2>&1 && command -v baresip >/dev/null 2>&1; } \
		|| { apt-get update -q && apt-get install -y -q sip-tester baresip; } \
		|| echo "sipp and baresip could not be installed: the SIP tests that need them will be skipped"

bench: $(STAMP)
	$(BIN)/python bench/turn_latency.py
	$(BIN)/python bench/turn_latency.py --audio
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/overhead_ratio.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/import_time.py
	$(BIN)/python bench/vad_cpu.py
	$(BIN)/python bench/realtime_cpu.py
	$(BIN)/python bench/chat_ttft.py
	$(BIN)/python bench/webrtc_cost.py
	$(BIN)/python bench/ws_cost.py

# The conversation benchmark (bench/conversation.py, about 40 minutes in real time): the
# shipped offline stack in its own server process, talked to by a real-time client, on a
# tuning and a held-out panel in 5 conditions. Debian's flite gives the panel 3 of its
# voices; without it those voices are skipped. Raw results: bench/.cache/conversation.json.
bench-conversation: $(STAMP)
	@command -v flite >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q flite; } \
		|| echo "flite could not be installed: its voices will be skipped"
	$(BIN)/python bench/conversation.py --json bench/.cache/conversation.json

# The randomized lifecycle tests, 100,000 sequences each (CI runs 1,500, 500 and 60): the
# same derandomized sequences every run; REJOINDER_STRESS_SEED=N explores others. Each
# test runs as 4 items of 25,000 sequences, each item 5 hypothesis runs of 5,000 (a run
# keeps what it learned of every sequence until it ends: tests/session/_lifecycle.py,
# RUN and PART), spread over both cores. No per-test timeout (the run takes minutes);
# every 10,000 sequences, each worker prints its sequences/s and its RSS to stderr.
STRESS_TESTS := tests/session/test_switch_random.py tests/session/test_lifecycle_random.py \
	tests/session/test_task_context_random.py
stress: $(STAMP)
	REJOINDER_STRESS_EXAMPLES=100000 REJOINDER_STRESS_PROGRESS=10000 \
		$(BIN)/pytest -n 2 -p no:cacheprovider --timeout 0 -s $(STRESS_TESTS)

# The scale tests (tests/scale, about two minutes): a head and a worker Ray node on
# 127.0.0.1 serving the demo agent through Ray Serve, real protocol clients, autoscaling
# and a node loss. Ray binds every interface and probes outside addresses, so the tests
# run in a network namespace of their own with only loopback up (ip netns: needs root);
# it is deleted afterwards, and the tests stop every Ray process they started.
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): $(STAMP)
	$(INSTALL) -e '.[ray]'
	touch $(RAY_STAMP)

test-scale: $(RAY_STAMP)
	@command -v ip >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q iproute2; }
	@ns=rj-scale-$$$$; ip netns add $$ns || exit 1; trap "ip netns del $$ns" EXIT; \
		ip netns exec $$ns ip link set lo up && \
		REJOINDER_SCALE=1 ip netns exec $$ns $(BIN)/pytest -p no:cacheprovider tests/scale

# constraints.txt from pyproject.toml: every extra, any platform, the newest versions
# that fit the pins (review the diff before committing it).
lock: $(UV)
	( sed -n '1,4p' constraints.txt && $(UV) pip compile --quiet --universal --no-header \
		--no-annotate pyproject.toml --python-version 3.11.7 \
		$(foreach extra,$(ALL_EXTRAS),--extra $(extra)) ) > constraints.new
	mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) build dist site .mypy_cache .pytest_cache .ruff_cache
