# eventpipe — see README.md. The two commands a newcomer needs: `make run`, `make test`.

GO        ?= go
BIN       := bin/eventpipe
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/eventpipe/eventpipe/app/cli.Version=$(VERSION)
TOOLS     := $(CURDIR)/.cache/bin
GOLANGCI  := $(TOOLS)/golangci-lint
GOLANGCI_VERSION := v2.15.0
# go test timeout for the whole suite; CI allows 90 minutes for everything.
TEST_TIMEOUT ?= 30m
COMPOSE   := docker compose -f compose/docker-compose.yml

.PHONY: image definitions all build run test test-short services services-stop chromium socketio-client asyncapi-parser amqp-peers lint fmt up down clean help

all: build

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/eventpipe
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./app/cmd/eventpipe

# make run BROKER=rabbitmq|sqs|postgres: the same specs and sample traffic on
# that broker, from config/examples/$(BROKER).yaml (make up or make services first).
BROKER    ?= memory
RUN_CONFIG = $(if $(filter memory,$(BROKER)),,config/examples/$(BROKER).yaml)
# The AWS SDK signs every request; the emulator takes any keys.
RUN_AWS    = $(if $(filter sqs,$(BROKER)),AWS_ACCESS_KEY_ID=$${AWS_ACCESS_KEY_ID:-test} AWS_SECRET_ACCESS_KEY=$${AWS_SECRET_ACCESS_KEY:-test})

run: build ## run the demo and the specs on the embedded memory broker (no services needed; BROKER=rabbitmq|sqs|postgres to switch); Ctrl-C to stop
	$(RUN_AWS) EVENTPIPE_CONFIG=$(RUN_CONFIG) EVENTPIPE_BROKER=$(BROKER) EVENTPIPE_DEMO_ENABLED=true \
		EVENTPIPE_INTERVIEWS_ENABLED=true EVENTPIPE_INTERVIEWS_SAMPLE_TRAFFIC=true \
		EVENTPIPE_STACKUP_ENABLED=true EVENTPIPE_STACKUP_SAMPLE_INTERVAL=3s EVENTPIPE_STACKUP_PROCESSORS=sample \
		EVENTPIPE_STACKUP_INTERNAL_API_KEY=make-run-demo-internal-api-key \
		EVENTPIPE_STACKUP_TOKEN_KEY=bWFrZS1ydW4tZGVtby10b2tlbi1rZXktMzItYnl0ZXM= \
		EVENTPIPE_DISPUTES_ENABLED=true EVENTPIPE_DISPUTES_SAMPLE_TRAFFIC=true \
		EVENTPIPE_BOOKING_ENABLED=true EVENTPIPE_BOOKING_SAMPLE_TRAFFIC=true EVENTPIPE_BOOKING_GATEWAY_ADDR=127.0.0.1:8084 \
		EVENTPIPE_JOINLINK_ENABLED=true EVENTPIPE_JOINLINK_SAMPLE_TRAFFIC=true EVENTPIPE_JOINLINK_ENABLE_SCHEDULER=$(if $(filter sqs,$(BROKER)),false,true) \
		EVENTPIPE_REALTIME_TOKEN_SECRET=make-run-demo-secret-not-for-production-use \
		EVENTPIPE_ADMIN_TOKEN_SECRET=make-run-demo-admin-secret-not-for-production ./$(BIN) serve

services: ## make sure PostgreSQL, RabbitMQ and the SQS emulator are up (CI=true: only check PG/RabbitMQ)
	.ci/services

services-stop: ## stop the SQS emulator started by `make services`
	.ci/sqs-emulator stop

# -count=1: results of tests that talk to services must never come from the cache.
test: services chromium socketio-client asyncapi-parser amqp-peers ## run the whole test suite against the real services
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

test-short: ## unit tests only, no services
	$(GO) test -short ./...

$(GOLANGCI):
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

lint: $(GOLANGCI) ## go vet + golangci-lint v2
	$(GO) vet ./...
	$(GOLANGCI) run ./...

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

# One process, one run: every pair side by side (alternating repetitions,
# queues purged between them), one table of medians and ratios. BENCH_QUICK=1
# for the quick pass (under 3 minutes); `make bench-quick` is the same.
.PHONY: bench bench-quick
bench: services ## benchmarks side by side with the raw clients, one table (BENCH_QUICK=1: quick pass)
	EVENTPIPE_BENCH=1 $(GO) test -run '^TestBenchTable$$' -v -count=1 -timeout 30m ./app/bench

bench-quick: ## the quick pass of `make bench`
	BENCH_QUICK=1 $(MAKE) bench

# Fault injection from the outside (RELIABILITY.md): separately started
# `eventpipe serve` processes killed, SIGTERMed and cut off from their broker
# while traffic flows, then every message counted; fails on a lost or
# duplicated effect or an event out of order. CHAOS_QUICK=1: the quick pass
# (about 10 minutes); CHAOS_BROKERS / CHAOS_FLOWS / CHAOS_FAULTS pick a subset;
# CHAOS_BROKER_RESTART=1 also restarts RabbitMQ and PostgreSQL (never while
# others use them).
CHAOS_TIMEOUT ?= 2h
.PHONY: chaos
chaos: services ## fault-injection harness: kills, SIGTERMs, cut/stalled connections; counts lost, duplicated, out of order (CHAOS_QUICK=1: quick pass)
	EVENTPIPE_CHAOS=1 $(GO) test -run '^TestChaos$$' -v -count=1 -timeout $(CHAOS_TIMEOUT) ./app/chaos

chromium: ## make sure headless Chromium is installed (the realtime demo page's browser test)
	.ci/chromium

socketio-client: ## install the npm socket.io-client the booking gateway's interop tests drive
	.ci/socketio-client

asyncapi-parser: ## install the npm @asyncapi/parser the AsyncAPI export's tests run
	.ci/asyncapi-parser

amqp-peers: ## install the foreign AMQP peers (aio-pika, amqplib) the StackUp interop tests drive
	.ci/amqp-peers

definitions: ## regenerate compose/rabbitmq/definitions.json from config/topology/*.yaml
	$(GO) run ./app/cmd/eventpipe topology export $(addprefix -f ,$(sort $(wildcard config/topology/*.yaml))) > compose/rabbitmq/definitions.json

image: ## build the container image eventpipe:dev (Dockerfile; needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t eventpipe:dev .

up: ## start RabbitMQ, PostgreSQL and the SQS emulator with docker compose (needs a Docker engine)
	$(COMPOSE) up -d --wait

down: ## stop the docker compose services
	$(COMPOSE) down

clean:
	rm -rf bin
