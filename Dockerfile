# eventpipe's container image: a static binary on a distroless base, run as
# a non-root user, with a health check on the admin server's /healthz.
#
#   docker build -t eventpipe .
#   docker run --rm -e EVENTPIPE_REALTIME_TOKEN_SECRET=… eventpipe serve --config /etc/eventpipe/examples/rabbitmq.yaml
#
# compose/docker-compose.yml builds and runs it (profile "eventpipe").
# compose/dockerfile_test.go checks the stages and runs the build command
# with the local Go toolchain (no Docker engine needed).

# The Go of go.mod's go line.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first: a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static (no cgo, so no libc to need), reproducible paths, no symbol table.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X github.com/eventpipe/eventpipe/app/cli.Version=${VERSION}" -o /out/eventpipe ./app/cmd/eventpipe

# static: CA certificates and tzdata, no shell, no package manager;
# nonroot: uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/eventpipe /usr/local/bin/eventpipe
COPY config/examples/ /etc/eventpipe/examples/
# Inside a container the servers listen on every interface (the port
# mappings decide who reaches them); a configuration file or variable can
# change them.
ENV EVENTPIPE_ADMIN_ADDR=0.0.0.0:9090 \
    EVENTPIPE_REALTIME_ADDR=0.0.0.0:8080
USER 65532:65532
# admin (/healthz, /readyz, /metrics), realtime SSE, booking gateway
EXPOSE 9090 8080 8084
# No curl in the image: the binary probes admin.addr's /healthz itself.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/eventpipe", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/eventpipe"]
CMD ["serve"]
