# ckptscand container image (docs/operations.md, "Container image"). Multi-stage, Debian 12 only:
#   docker build -t ckptscan:0.1.0 .
#   docker run --rm --read-only --tmpfs /tmp -v ckptscan-state:/var/lib/ckptscan \
#     --tmpfs /run/ckptscan:uid=10001,gid=10001,mode=0750 -p 8081:8081 ckptscan:0.1.0
# With TLS: mount tls.crt, tls.key (and ca.crt for client certificates) at /etc/ckptscan/tls;
# the daemon then also serves gRPC on 8443. With --require-client-cert appended, mTLS.
# tests/deploy/docker_files_test.py checks this file statically (no image is built in CI).

# ---- build: the same setup script and CMake install a new user runs
FROM debian:bookworm-slim AS build
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
 && cmake --build /build --target ckptscan ckptscand ckptscan-worker \
 && DESTDIR=/install cmake --install /build --prefix /usr/local --strip

# ---- runtime: ckptscand's shared libraries only (ckptscan and ckptscan-worker are static-pie)
FROM debian:bookworm-slim
# From `ldd ckptscand` -> `dpkg -S`: gRPC 1.51, protobuf, abseil, OpenSSL, c-ares, RE2, zlib,
# libstdc++, prometheus-cpp and its civetweb (the metrics port) (docker_files_test checks this
# list against the built binary).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libssl3 libc-ares2 libre2-9 \
      zlib1g libstdc++6 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 ckptscan \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ckptscan --no-create-home \
      --shell /usr/sbin/nologin ckptscan \
 && install -d -o 10001 -g 10001 -m 0750 /run/ckptscan \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/ckptscan \
 && install -d -m 0755 /etc/ckptscan/tls
# The binaries side by side (both run the ckptscan-worker beside them), rules, docs.
COPY --from=build /install/usr/local/bin/ckptscan /install/usr/local/bin/ckptscand /install/usr/local/bin/ckptscan-worker /usr/local/bin/
COPY --from=build /install/usr/local/share/ckptscan/ /usr/local/share/ckptscan/
COPY --from=build /install/usr/local/share/doc/ckptscan/ /usr/local/share/doc/ckptscan/
COPY deploy/docker/entrypoint.sh /usr/local/lib/ckptscan/entrypoint.sh
USER 10001:10001
VOLUME ["/var/lib/ckptscan"]
# 8443: gRPC over TLS (when /etc/ckptscan/tls has tls.crt and tls.key); 8081: gRPC health alone,
# plaintext, for probes.
EXPOSE 8443 8081
ENTRYPOINT ["/usr/local/lib/ckptscan/entrypoint.sh"]
