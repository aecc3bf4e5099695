# syntax=docker/dockerfile:1
#
# Two images from one build stage (make docker builds both):
#   --target benthos-zerobus  the product binary (the default, last stage)
#   --target emulator         the local Zerobus + workspace emulator
# Both are static binaries (CGO_ENABLED=0, the same `make build` as on a
# workstation) on a distroless, non-root base.
#
# Base images are pinned by digest so a rebuild of an old commit gets the same
# bases; the tag stays for the reader. The digests were not resolved against
# the registries from this repository's build machine (it has no registry
# access): they are the ones public Dockerfiles pin for these tags (distroless
# static-debian12:nonroot as of 2026-08-26). Refresh both with
#   docker buildx imagetools inspect golang:1.26-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
# (or `crane digest <image>`) and replace the sha256 values.
ARG GO_IMAGE=golang:1.26-bookworm@sha256:9fdc884aacc3bec89b20ffc69f4bb369c78210e3e4f600387b5128b12c199f81
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION} BIN=/out/benthos-zerobus EMU=/out/zerobus-emulator \
 && mkdir -p /out/data

# The emulator: workspace HTTP API on 8080, Zerobus gRPC on 50051, tables under
# /data (mount a volume to keep them). It listens on all interfaces inside the
# container; the zerobus output accepts plain http:// only for a loopback host,
# so run the pipeline in the emulator's network namespace
# (docker run --network container:<emulator>) or with --network host, and point
# it at http://127.0.0.1:50051 and http://127.0.0.1:8080. Credentials:
# client id `emulator`, secret `emulator-secret`. The emulator's admin API
# (/emulator/v1/…: the rows of every table, faults, grants) answers loopback
# clients only, i.e. the pipeline in the emulator's network namespace; to use
# it through a published port, give it a bearer token:
# docker run -e ZEROBUS_EMULATOR_ADMIN_TOKEN=<token> … and send
# `Authorization: Bearer <token>`. The start-up banner says which applies.
FROM ${RUNTIME_IMAGE} AS emulator
COPY --from=build /out/zerobus-emulator /usr/local/bin/zerobus-emulator
COPY --from=build --chown=65532:65532 /out/data /data
USER nonroot:nonroot
EXPOSE 8080 50051
VOLUME ["/data"]
ENTRYPOINT ["/usr/local/bin/zerobus-emulator", "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:50051", "--data", "/data"]

# The product: Benthos with the zerobus output. The config is read from
# /benthos.yaml (the first of Benthos' default config paths); mount yours there:
#   docker run -v $PWD/config.yaml:/benthos.yaml:ro -p 4195:4195 benthos-zerobus:<version>
# Port 4195 is the Benthos HTTP server (/metrics, /ready, /ping) at Benthos'
# default `http.address`, 0.0.0.0:4195; keep that address (or publish the one
# your config sets) for Prometheus to scrape. Pass any other
# subcommand as arguments, e.g. `lint /benthos.yaml` or `create stdin//zerobus`.
FROM ${RUNTIME_IMAGE} AS benthos-zerobus
COPY --from=build /out/benthos-zerobus /usr/local/bin/benthos-zerobus
USER nonroot:nonroot
EXPOSE 4195
ENTRYPOINT ["/usr/local/bin/benthos-zerobus"]
CMD ["run", "/benthos.yaml"]
