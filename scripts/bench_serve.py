"""Load generator for OpenAI-compatible servers (lucent serve, llama-server).

N clients start together; each sends one streaming /v1/completions request: a prompt of
exactly P tokens (token ids, a different stretch of the text for every client and round,
so no server can reuse a cached prompt) and T greedy tokens with ignore_eos, so every
request generates exactly T tokens. Reports per client count, medians over rounds:

- aggregate generated tok/s: all clients' tokens / wall time from the first request
  sent to the last token received;
- time to first token (p50, p99 over all requests): request sent → first token;
- inter-token latency (p50, p99 over all gaps): between consecutive tokens of a request.

Standard library only. Usage:
  python3 bench_serve.py --url http://127.0.0.1:8080 --model smollm2 --clients 1 4 8 16
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

TEXT = (
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, "
    "and nothing particular to interest me on shore, I thought I would sail about a little and see the watery "
    "part of the world. It is a way I have of driving off the spleen and regulating the circulation. Whenever "
    "I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my soul; whenever "
    "I find myself involuntarily pausing before coffin warehouses, and bringing up the rear of every funeral I "
    "meet; and especially whenever my hypos get such an upper hand of me, that it requires a strong moral "
    "principle to prevent me from deliberately stepping into the street, and methodically knocking people's "
    "hats off, then, I account it high time to get to sea as soon as I can. "
)


def post(url, path, body, headers=None):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    return c, c.getresponse()


def tokenize(url, model):
    c, r = post(url, "/tokenize", {"content": TEXT * 12, "model": model})
    ids = json.loads(r.read())["tokens"]
    c.close()
    return [t if isinstance(t, int) else t["id"] for t in ids]


def one_request(url, model, prompt, max_tokens, out):
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    t0 = time.perf_counter()
    c, r = post(url, "/v1/completions", body)
    if r.status != 200:
        out.append({"error": f"{r.status} {r.read()[:200]!r}"})
        return
    times = []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            out.append({"error": str(chunk["error"])})
            return
        for ch in chunk.get("choices", []):
            if ch.get("text"):
                times.append(time.perf_counter())
    c.close()
    out.append({"sent": t0, "times": times})


def run(url, model, ids, clients, prompt_tokens, max_tokens, round_no):
    prompts = []
    for i in range(clients):
        start = (round_no * 16 + i) * 7 % max(1, len(ids) - prompt_tokens)
        prompts.append(ids[start : start + prompt_tokens])
    out = []
    threads = [threading.Thread(target=one_request, args=(url, model, p, max_tokens, out)) for p in prompts]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o["error"] for o in out if "error" in o]
    if errors:
        raise SystemExit(f"{clients} clients: {errors[0]}")
    end = max(o["times"][-1] for o in out)
    # Tokens: streamed chunks with text. Each server sends one chunk per token here
    # (greedy, ignore_eos); a token whose bytes end mid-character may be held back and
    # joined to the next chunk, so count max_tokens per request instead.
    tokens = max_tokens * clients
    ttft = [o["times"][0] - o["sent"] for o in out]
    itl = []
    for o in out:
        n = len(o["times"])
        if n > 1:
            gaps = [b - a for a, b in zip(o["times"], o["times"][1:])]
            # Chunks that joined tokens: spread their gap over the tokens they carry.
            scale = (n - 1) / max(1, max_tokens - 1)
            itl.extend(g * scale for g in gaps)
    return tokens / (end - t0), ttft, itl


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--label", default="server")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ids = tokenize(a.url, a.model)
    results = []
    for n in a.clients:
        rates, ttfts, itls = [], [], []
        for r in range(a.rounds):
            rate, ttft, itl = run(a.url, a.model, ids, n, a.prompt_tokens, a.max_tokens, r)
            rates.append(rate)
            ttfts += ttft
            itls += itl
        row = {
            "label": a.label,
            "clients": n,
            "tok_s": statistics.median(rates),
            "tok_s_all": rates,
            "ttft_p50_ms": 1000 * pct(ttfts, 50),
            "ttft_p99_ms": 1000 * pct(ttfts, 99),
            "itl_p50_ms": 1000 * pct(itls, 50),
            "itl_p99_ms": 1000 * pct(itls, 99),
        }
        results.append(row)
        if not a.json:
            print(
                f"{a.label:>14} {n:>3} clients: {row['tok_s']:7.1f} tok/s  "
                f"TTFT p50 {row['ttft_p50_ms']:7.1f} ms p99 {row['ttft_p99_ms']:7.1f} ms  "
                f"ITL p50 {row['itl_p50_ms']:6.1f} ms p99 {row['itl_p99_ms']:6.1f} ms",
                flush=True,
            )
    if a.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
