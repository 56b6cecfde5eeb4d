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
#
# Both bases are pinned (cmd/limitd/deploy_test.go checks it): the runtime
# base by digest, Debian 13's distroless static image, whose /bin is a link
# to usr/bin. The binary goes to /usr/local/bin and the link to /usr/bin:
# /bin/ratelimit is /usr/bin/ratelimit there. Only /usr is copied into,
# a real directory in the base, so that no builder has to write through
# /bin (BuildKit refuses to copy a directory bin onto the link).

FROM golang:1.26.8-trixie AS build
WORKDIR /src
# Dependencies first: this layer stays cached while only the code changes.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/usr/local/bin/limitd ./cmd/limitd
RUN mkdir -p /out/usr/bin && ln -s /usr/local/bin/limitd /out/usr/bin/ratelimit

FROM gcr.io/distroless/static-debian13:nonroot@sha256:1c2c046bc09ed40fad370b599a0b1ae7987f55b01e247cf27a7c27cd97e5bbc7
# Copied as a directory, so that usr/bin/ratelimit stays a link.
COPY --from=build /out/usr/ /usr/
# The base's nonroot user, by number: the kubelet can check a number
# against runAsNonRoot, not a name.
USER 65532:65532
ENV LIMITD_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/limitd"]
CMD ["serve"]
