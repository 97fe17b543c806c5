# The one volplane image: the reference driver (`volplane serve`), the
# control-plane roles (`volplane controller`) and node-driver-registrar
# (`volplane registrar`).
#   docker build -t ghcr.io/volplane/volplane:v0.1.0 .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# No debug info in the image (the release profile keeps it for profiling:
# 200 MB against 37 MB); symbols stay, so backtraces still name functions.
ENV CARGO_PROFILE_RELEASE_DEBUG=0
RUN cargo build --release --locked -p volplane-cli \
 && strip --strip-debug -o /volplane target/release/volplane

FROM debian:bookworm-slim
# What the reference driver's node side runs: mkfs.ext4/resize2fs,
# blkid, losetup.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      e2fsprogs util-linux mount ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /volplane /usr/local/bin/volplane
ENTRYPOINT ["/usr/local/bin/volplane"]
