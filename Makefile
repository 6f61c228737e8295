# The two commands: `make run` (set up and serve) and `make test` (set up and test).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
CHROMIUM := /usr/bin/chromium

.PHONY: run test setup worker browser-test fuzz chromium messages clean

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

setup: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0

run: setup
	$(PY) manage.py setup_demo
	$(PY) manage.py import_dataset --format golden evaluation/fixtures/demo-golden.json --kb docs
	$(PY) manage.py import_dataset --format golden evaluation/fixtures/docs-answers.json --kb docs
	$(PY) manage.py import_dataset --format golden evaluation/fixtures/docs-answers-held-out.json --kb docs
	$(PY) manage.py import_dataset --format golden evaluation/fixtures/docs-multidoc.json --kb docs
	$(PY) manage.py build_graph --kb docs
	@echo "Serving on http://127.0.0.1:$(PORT)/"
	$(VENV)/bin/daphne -b 127.0.0.1 -p $(PORT) agentic_rag.asgi:application

test: $(VENV)/.installed chromium
	$(PY) -m pytest
	$(MAKE) browser-test

# Playwright's event loop clashes with pytest-asyncio, so browser tests run on their own.
browser-test: $(VENV)/.installed
	$(PY) -m pytest browser_tests -p no:asyncio

# The property tests (hypothesis) searched with fresh seeds for FUZZ_S seconds: pass after
# pass, each file in a new order with the "fuzz" profile's examples, the last pass cut at the
# deadline. The first failure stops it, and hypothesis prints the example to keep as a test.
FUZZ_S ?= 1800
FUZZ_TESTS = $(wildcard */tests/test_*properties*.py */tests/test_linear_time*.py)
fuzz: $(VENV)/.installed
	@end=$$(( $$(date +%s) + $(FUZZ_S) )); passes=0; \
	while :; do \
	  for file in $$(printf '%s\n' $(FUZZ_TESTS) | shuf); do \
	    left=$$(( end - $$(date +%s) )); rc=0; \
	    [ $$left -gt 0 ] || { echo "fuzz: $(FUZZ_S) s clean, $$passes whole passes"; exit 0; }; \
	    HYPOTHESIS_PROFILE=fuzz timeout --signal=INT $$left $(PY) -m pytest -x -q -p no:cacheprovider $$file || rc=$$?; \
	    if [ $$rc -eq 124 ] || [ $$rc -eq 2 ]; then echo "fuzz: $(FUZZ_S) s clean, $$passes whole passes"; exit 0; fi; \
	    [ $$rc -eq 0 ] || exit $$rc; \
	  done; \
	  passes=$$((passes + 1)); echo "fuzz: pass $$passes clean"; \
	done

# Browser tests drive Debian's Chromium, with a CJK font so Chinese text renders in
# screenshots; install both when we can (root with apt).
CJK_FONT := /usr/share/fonts/truetype/wqy/wqy-microhei.ttc
chromium:
	@if [ ! -x $(CHROMIUM) ] || [ ! -f $(CJK_FONT) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei; \
	  else echo "Chromium or the CJK font is missing: browser tests may skip (apt-get install chromium fonts-wqy-microhei)"; fi; \
	fi

# A Celery worker for the full stack (needs REDIS_URL or CELERY_BROKER_URL).
worker: $(VENV)/.installed
	$(VENV)/bin/celery -A agentic_rag worker --queues default,ingestion,embedding,graph --loglevel INFO

# The Chinese interface: extract the English messages into locale/zh_Hans's .po, translate
# the new entries there, then compile. The .mo is committed, so setup needs no gettext.
messages: $(VENV)/.installed
	$(PY) manage.py makemessages --no-wrap --locale zh_Hans --no-location --no-obsolete --ignore 'var/*' --ignore 'artifacts/*'
	$(PY) manage.py compilemessages --locale zh_Hans --ignore '.venv'

clean:
	rm -rf $(VENV) var/staticfiles
