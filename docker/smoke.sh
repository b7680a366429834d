#!/usr/bin/env bash
# Smoke test of the deployment: build the images with podman (the base image locally, since
# images cannot be pulled here), bring the compose stack up (Redis with AOF, API with two
# uvicorn workers in queue mode, one queue worker), create a model, post labelled events,
# wait until the worker has learned them, read the metrics, and tear everything down.
#
#   bash docker/smoke.sh            # API on a free port; KEEP=1 leaves the stack running
set -euo pipefail
cd "$(dirname "$0")/.."

bash docker/podman-setup.sh >/dev/null
bash docker/make-base-image.sh

ca_mount=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  ca_mount=(-v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro)
fi
echo "== building images"
podman build --quiet --format docker "${ca_mount[@]}" -f docker/Dockerfile \
  -t localhost/aucstream:latest . >/dev/null
podman build --quiet --format docker -f docker/redis.Dockerfile \
  -t localhost/aucstream-redis:7 docker >/dev/null

API_PORT="${API_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export API_PORT
project=aucstream-smoke
compose=(podman-compose -p "$project" -f docker-compose.yml)
teardown() {
  if [ "${KEEP:-0}" != 1 ]; then
    echo "== tearing down"
    "${compose[@]}" down -v >/dev/null 2>&1 || true
  fi
}
trap teardown EXIT

echo "== starting the stack (API on 127.0.0.1:$API_PORT)"
"${compose[@]}" up -d >/dev/null 2>&1
base="http://127.0.0.1:$API_PORT"
# Each uvicorn worker loads the kernels on its own and the kernel hands a new connection to any
# of them, so one 200 proves only one worker ready (the cause of a failed run in two): wait for
# READY_STREAK consecutive 200s, each on a new connection (with 2 workers, a worker still
# loading survives 10 draws with probability 2**-10).
streak_needed="${READY_STREAK:-$((5 * ${API_WORKERS:-2}))}"
ready=0
streak=0
for _ in $(seq 1 1200); do
  if curl -fsS "$base/readyz" >/dev/null 2>&1; then
    streak=$((streak + 1))
    if [ "$streak" -ge "$streak_needed" ]; then ready=1; break; fi
    sleep 0.05
  else
    streak=0
    sleep 0.5
  fi
done
if [ "$ready" != 1 ]; then
  echo "FAIL: the API did not become ready; its log:"
  podman logs "${project}_api_1" 2>&1 | tail -30
  exit 1
fi
curl -fsS "$base/readyz"; echo

echo "== creating a model and posting 2,000 labelled events in 4 batches"
curl -fsS -X POST "$base/v1/models" -H 'content-type: application/json' \
  -d '{"id": "smoke", "learner": "spam", "n_features": 5, "window": 5000}' >/dev/null
python3 - "$base" <<'PY'
import json, random, sys, urllib.request
base = sys.argv[1]
rng = random.Random(0)
for batch in range(4):
    events = []
    for i in range(500):
        y = 1 if rng.random() < 0.1 else 0
        x = [rng.gauss(0.8 * y, 1.0) for _ in range(5)]
        events.append({"id": f"e{batch}-{i}", "x": x, "y": y})
    request = urllib.request.Request(
        f"{base}/v1/models/smoke/events", data=json.dumps({"events": events}).encode(),
        headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as response:
        body = json.loads(response.read())
        print("POST events ->", response.status, {k: body.get(k) for k in ("queued", "learned")})
PY

echo "== waiting for the worker to learn them"
for _ in $(seq 1 60); do
  learned=$(curl -fsS "$base/v1/models/smoke" | python3 -c 'import json,sys; print(json.load(sys.stdin)["counts"]["events_learned"])')
  [ "$learned" = 2000 ] && break
  sleep 1
done
echo "events learned: $learned"
curl -fsS "$base/v1/models/smoke/metrics" | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(json.dumps({k: m[k] for k in ("counts", "window", "queue") if k in m}, indent=1))'
echo "== queue worker healthcheck (its own heartbeat in Redis)"
podman exec "${project}_worker_1" aucstream worker --check
echo "== container status"
podman ps --filter "name=$project" --format '{{.Names}}  {{.Status}}'
[ "$learned" = 2000 ] || { echo "FAIL: the worker learned $learned of 2000 events"; exit 1; }
echo "SMOKE OK"
