# syntax=docker/dockerfile:1
# The joinery image: the release binary with the built-in plugins, on distroless, as non-root.
#
#   docker build -t joinery:dev .
#
# The binary links glibc and libgcc_s (nothing else), so the final stage is distroless/cc on
# Debian 12, the same Debian as the builder. It runs with a read-only root filesystem: the only
# place it writes is the compiled-plugin cache, JOINERY_PLUGIN_CACHE_DIR, which the Helm chart
# mounts as an emptyDir at the same path.

# ---- builder: the host binary and, through host/builtin-plugins's build script, the wasm plugins
FROM docker.io/library/rust:1.95.0-bookworm AS builder
WORKDIR /src
# rust-toolchain.toml pins 1.95.0 with the wasm32-wasip2 target; the image ships the toolchain,
# the plugins need the target.
RUN rustup target add wasm32-wasip2
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p joinery \
    && install -D -m 0755 target/release/joinery /out/joinery \
    && mkdir -p /out/cache

# ---- final image
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/joinery /usr/local/bin/joinery
# The compiled-plugin cache: writable by the nonroot user when no volume is mounted there.
COPY --from=builder --chown=65532:65532 /out/cache /var/cache/joinery
ENV JOINERY_PLUGIN_CACHE_DIR=/var/cache/joinery
# The allocator (mimalloc) gives freed pages back to the system at once instead of 10 ms
# later, which, for a thread that then goes idle (the plugin compiler's), is never: tens of
# MiB of resident memory on a large cluster (docs/operations.md).
ENV MIMALLOC_PURGE_DELAY=0
USER nonroot:nonroot
# METRICS_PORT and HEALTH_PROBE_PORT.
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/joinery"]
CMD ["run"]
