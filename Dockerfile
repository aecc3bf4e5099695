# Multi-stage build: the same `make build` as on a workstation, shipped as a
# static binary on a distroless, non-root base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION} BIN=/out/benthos-zerobus

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/benthos-zerobus /usr/local/bin/benthos-zerobus
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/benthos-zerobus"]
CMD ["run", "/etc/benthos/config.yaml"]
