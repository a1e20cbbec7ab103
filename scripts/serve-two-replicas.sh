#!/usr/bin/env bash
# Two `lucent serve` replicas behind nginx (Debian's `nginx-light` or `nginx`), all on
# loopback, as docs/serving.md describes: replicas on 8081 and 8082, nginx on 8080
# spreading requests by least connections, streams unbuffered, a replica that answers
# 503 (loading, draining) or 429 (full) skipped for the other.
#
#   scripts/serve-two-replicas.sh [SECONDS]     # default 60; everything stops after
#
# Needs: `lucent` on the PATH (cargo build --release -p lucent-cli; target/release),
# nginx (apt-get install nginx-light). Writes only under a temporary folder.
set -euo pipefail
SECS="${1:-60}"
DIR="$(mktemp -d /tmp/lucent-replicas.XXXXXX)"
trap 'kill $(jobs -p) 2>/dev/null || true; nginx -p "$DIR" -c nginx.conf -s stop 2>/dev/null || true' EXIT

for port in 8081 8082; do
  lucent serve -m smollm2 -m minilm --port "$port" --parallel 4 --exit-after "$SECS" \
    2> "$DIR/replica-$port.log" &
done

cat > "$DIR/nginx.conf" <<EOF
worker_processes 1;
pid $DIR/nginx.pid;
error_log $DIR/error.log;
events { worker_connections 1024; }
http {
  access_log $DIR/access.log;
  upstream lucent {
    least_conn;                       # the replica with fewer requests in flight
    server 127.0.0.1:8081 max_fails=1 fail_timeout=5s;
    server 127.0.0.1:8082 max_fails=1 fail_timeout=5s;
    keepalive 16;
  }
  server {
    listen 127.0.0.1:8080;
    client_max_body_size 2m;          # as lucent serve --max-body
    location / {
      proxy_pass http://lucent;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;            # Server-Sent Events go out token by token
      proxy_read_timeout 600s;        # as lucent serve --timeout
      # Loading, draining (503) or full (429): the request was not run; try the other.
      proxy_next_upstream error timeout http_503 http_429 non_idempotent;
    }
  }
}
EOF
nginx -p "$DIR" -c nginx.conf

# Ready when both replicas say so.
for port in 8081 8082; do
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.1
  done
done
echo "two replicas behind http://127.0.0.1:8080 for ${SECS}s (logs in $DIR)"
for i in 1 2 3 4; do
  curl -s http://127.0.0.1:8080/v1/completions \
    -d '{"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}'
  echo
done
# Which replica answered: each counts its own requests.
for port in 8081 8082; do
  printf 'replica %s: ' "$port"
  curl -s "http://127.0.0.1:$port/metrics" | grep '^lucent_requests_total{route="/v1/completions"' || echo none
done
wait $(jobs -p | head -2) 2>/dev/null || true
