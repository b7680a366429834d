# Redis for the compose stack, built on the same local base image (images cannot be pulled on
# our build machines; where they can, `REDIS_IMAGE=redis:7` in the environment replaces this).
ARG BASE_IMAGE=localhost/aucstream-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
EXPOSE 6379
HEALTHCHECK --interval=5s --timeout=2s --retries=10 CMD ["redis-cli", "ping"]
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data", "--appendonly", "yes", "--appendfsync", "always"]
