# doqscan tools (zprobe, verify, measure, optout, jobrun, dbctl) on Debian bookworm.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -buildvcs=false -o /out/bin/ ./cmd/...

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends zmap iproute2 ca-certificates libcap2-bin \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/doqscan
COPY --from=build /out/bin/ bin/
COPY deploy/ deploy/
COPY blocklist/ blocklist/
COPY probes/ probes/
COPY schema.sql README.md ./
ENV DOQSCAN_HOME=/opt/doqscan PATH=/opt/doqscan/bin:$PATH
ENTRYPOINT []
CMD ["bin/dbctl", "status"]
