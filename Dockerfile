# limitd: a static binary on distroless, running as an unprivileged user.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t limitd .
#   docker run -p 8080:8080 -e LIMITD_ADMIN_TOKEN=... -e LIMITD_REDIS_URL=redis://redis:6379 limitd
# The image listens on 0.0.0.0:8080, so limitd refuses to start without
# LIMITD_ADMIN_TOKEN (or LIMITD_INSECURE=true). See docker-compose.yml.
#
# /bin/ratelimit is a link to the same binary: started by that name, as
# Envoy Gateway and the reference rate limit server's manifests start their
# container (command: /bin/ratelimit), limitd serves Envoy's rate limit
# service configured by the reference's environment variables (docs/envoy.md,
# "limitd as the reference server"). deploy/envoy-gateway/ and
# deploy/ratelimit/ run it that way.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer stays cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/limitd ./cmd/limitd
# An absolute link: /bin may itself be a link in the runtime image.
RUN mkdir -p /out/bin && ln -s /limitd /out/bin/ratelimit

FROM gcr.io/distroless/static:nonroot
# Copied as a directory, so that bin/ratelimit stays a link.
COPY --from=build /out/ /
USER nonroot:nonroot
ENV LIMITD_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/limitd"]
CMD ["serve"]
